#include "eval/choice.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "calib/auto_profile.h"
#include "eval/decode_eval.h"
#include "eval/json_lines.h"
#include "eval/policy_runs.h"
#include "model/sampler.h"
#include "model/session.h"
#include "fasa/error.h"
#include "util/progress.h"

namespace fasa {

std::vector<ChoiceItem> load_choice_items(const std::string& path) {
  std::vector<ChoiceItem> items;
  for_each_json_line(path, "items", [&](const nlohmann::json& j, int ln) {
    ChoiceItem it;
    it.id = line_id(j, ln);
    it.where = path + ": line " + std::to_string(ln);
    it.context = string_field(j, "context", path, ln);
    if (it.context.empty()) fail_line(path, ln, "empty context");
    const auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->size() < 2)
      fail_line(path, ln, "'choices' must be a list of at least two strings");
    for (const auto& c : *choices) {
      if (!c.is_string() || c.get<std::string>().empty()) fail_line(path, ln, "'choices' must be non-empty strings");
      it.choices.push_back(c.get<std::string>());
    }
    const auto gold = j.find("gold");
    if (gold == j.end() || !gold->is_number_integer() || gold->get<int64_t>() < 0 ||
        gold->get<int64_t>() >= (int64_t)it.choices.size())
      fail_line(path, ln, "'gold' must be the index of one of the choices");
    it.gold = gold->get<int>();
    items.push_back(std::move(it));
  });
  return items;
}

namespace {

// An item's token sequences as the harness splits them: [choice] (context ids, continuation ids).
struct Encoded {
  std::vector<int32_t> context;                 // [n_ctx] with the BOS, if any
  std::vector<std::vector<int32_t>> choices;    // [choices][n_cont]
};

Encoded encode_item(const Tokenizer& tok, const ChoiceItem& it, bool bos) {
  // The context's trailing whitespace belongs to the continuation (it tokenizes with the next word).
  const size_t keep = it.context.find_last_not_of(" \t\r\n\v\f") + 1;
  const std::string context = it.context.substr(0, keep), moved = it.context.substr(keep);
  Encoded e;
  const bool add_bos = bos && tok.add_bos();
  // (control tokens written in the text are those tokens, as the server's /tokenize reads them)
  e.context = tok.encode(context, add_bos, true);
  if (e.context.empty()) throw Error(it.where + ": the context has no tokens");
  for (const std::string& choice : it.choices) {
    std::vector<int32_t> whole = tok.encode(context + moved + choice, add_bos, true);
    // (a merge across the boundary can make the whole shorter than the context: then nothing is scored
    // but what follows the context's length, as the harness does)
    whole.erase(whole.begin(), whole.begin() + (ptrdiff_t)std::min(whole.size(), e.context.size()));
    if (whole.empty()) throw Error(it.where + ": choice '" + choice + "' adds no token to the context");
    e.choices.push_back(std::move(whole));
  }
  return e;
}

// Sum of log p(continuation) with every token decoded under `policy` from the start (the context again
// for each choice: as the server scores each of the harness's requests).
double continuation_loglikelihood(const Model& m, std::shared_ptr<AttentionPolicy> policy, const PolicyOptions& po,
                                  const std::vector<int32_t>& context, const std::vector<int32_t>& cont) {
  Session session(m, session_options(po, (int64_t)(context.size() + cont.size())), std::move(policy));
  std::span<const float> logits;
  for (int32_t t : context) logits = session.decode(t);
  double sum = 0;
  for (size_t i = 0; i < cont.size(); ++i) {
    sum += token_logprob(logits, cont[i], 0).logprob;  // as the server's echoed logprobs
    if (i + 1 < cont.size()) logits = session.decode(cont[i]);
  }
  return sum;
}

}  // namespace

std::vector<EvalRecord> eval_choice(const Model& m, const std::vector<ChoiceItem>& items,
                                    const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                    const PolicyOptions& base, bool bos, std::vector<ChoiceAnswer>* answers) {
  if (items.empty()) throw Error("choice: no items");
  std::vector<Encoded> encoded;
  std::vector<std::vector<int32_t>> prompts;  // an automatic profile's text: the contexts
  for (const ChoiceItem& it : items) {
    encoded.push_back(encode_item(m.tokenizer, it, bos));
    prompts.push_back(encoded.back().context);
  }
  AutoProfileStore autos(m);
  const std::vector<PolicyRun> runs = policy_runs(m, policies, base);
  prepare_auto_profile(autos, runs, prompts);
  std::vector<std::map<std::string, int>> correct(runs.size());  // [run][budget]
  ProgressBar bar("choice", (int64_t)(items.size() * runs.size() * budgets.size()));
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& budget : budgets) {
      PolicyOptions po = runs[r].options;
      po.budget = Budget::parse(budget);
      for (size_t i = 0; i < items.size(); ++i) {
        ChoiceAnswer a{items[i].id, runs[r].name, runs[r].variant, budget, {}, 0, items[i].gold};
        for (const auto& cont : encoded[i].choices)
          a.loglikelihoods.push_back(continuation_loglikelihood(m, make_policy(po, m, &autos), po, encoded[i].context, cont));
        a.chosen = (int)(std::max_element(a.loglikelihoods.begin(), a.loglikelihoods.end()) - a.loglikelihoods.begin());
        correct[r][budget] += a.chosen == a.gold;
        if (answers) answers->push_back(std::move(a));
        bar.advance();
      }
    }
  std::vector<EvalRecord> out;
  const auto n = (int64_t)items.size();
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& budget : budgets)
      out.push_back({"choice", runs[r].name, runs[r].variant, budget, "accuracy", "all", 0, (double)correct[r][budget] / (double)n, n});
  return out;
}

void write_choice_answers(const std::vector<ChoiceAnswer>& answers, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& a : answers)
    out << nlohmann::json{{"id", a.item_id},   {"policy", a.policy}, {"variant", a.variant}, {"budget", a.budget},
                          {"loglikelihoods", a.loglikelihoods}, {"chosen", a.chosen}, {"gold", a.gold}}
               .dump()
        << "\n";
  if (!out) fail(path, "cannot write answers");
}

}  // namespace fasa
