#include "eval/retrieval.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "eval/decode_eval.h"
#include "model/sampler.h"
#include "model/session.h"
#include "util/error.h"
#include "util/progress.h"

namespace fasa {

std::vector<RetrievalTask> load_retrieval_tasks(const std::string& path, int per_type) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open tasks");
  std::vector<RetrievalTask> tasks;
  std::map<std::string, int> count;
  std::string line;
  for (int ln = 1; std::getline(in, line); ++ln) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, "line " + std::to_string(ln) + ": not valid JSON: " + e.what());
    }
    RetrievalTask t;
    for (auto [key, field] : {std::pair<const char*, std::string*>{"type", &t.type}, {"prompt", &t.prompt},
                              {"answer", &t.answer}}) {
      if (!j.is_object() || !j.contains(key) || !j[key].is_string())
        fail(path, "line " + std::to_string(ln) + ": missing string field '" + key + "'");
      *field = j[key].get<std::string>();
    }
    t.id = j.contains("id") ? j["id"].dump() : std::to_string(ln);
    if (t.answer.empty()) fail(path, "line " + std::to_string(ln) + ": empty answer");
    if (per_type > 0 && count[t.type]++ >= per_type) continue;
    tasks.push_back(std::move(t));
  }
  if (tasks.empty()) fail(path, "no tasks");
  return tasks;
}

namespace {

bool answered(const Model& m, std::shared_ptr<TokenSelector> policy, const RetrievalTask& t) {
  const Tokenizer& tok = m.tokenizer;
  const std::vector<int32_t> prompt = tok.encode(t.prompt, tok.add_bos());
  const int max_new = std::min<int>(32, (int)tok.encode(t.answer, false).size() + 2);
  SessionOptions so;
  so.n_ctx = (int64_t)prompt.size() + max_new;
  Session s(m, so, std::move(policy));
  auto logits = s.eval(prompt);
  std::string text;
  for (int i = 0; i < max_new; ++i) {
    const int32_t next = argmax(logits);
    if (next == tok.eos()) break;
    text += tok.token_text(next);
    const size_t start = text.find_first_not_of(" \t\n\r");
    if (start != std::string::npos && text.size() - start >= t.answer.size()) break;  // long enough to judge
    if (i + 1 < max_new) logits = s.eval(std::span<const int32_t>(&next, 1));
  }
  const size_t start = text.find_first_not_of(" \t\n\r");
  return start != std::string::npos && text.compare(start, t.answer.size(), t.answer) == 0;
}

}  // namespace

std::vector<EvalRecord> eval_retrieval(const Model& m, const std::vector<RetrievalTask>& tasks,
                                       const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                       const PolicyOptions& base) {
  std::vector<EvalRecord> out;
  std::vector<std::string> types;
  for (auto& t : tasks)
    if (std::find(types.begin(), types.end(), t.type) == types.end()) types.push_back(t.type);
  for (const auto& name : policies)
    for (const auto& budget : budgets) {
      PolicyOptions po = base;
      po.attn = name;
      po.budget = budget;
      std::map<std::string, std::pair<int, int>> score;  // type -> (correct, total)
      ProgressBar bar("retrieval " + name + " @ " + budget, (int64_t)tasks.size());
      for (const auto& t : tasks) {
        const bool ok = answered(m, make_selector(po, m), t);
        score[t.type].first += ok;
        score[t.type].second += 1;
        score["all"].first += ok;
        score["all"].second += 1;
        bar.advance();
      }
      types.push_back("all");
      for (const auto& type : types)
        out.push_back({"retrieval", name, policy_variant(name, po), budget, "accuracy", type, 0,
                       (double)score[type].first / score[type].second, score[type].second});
      types.pop_back();
    }
  return out;
}

}  // namespace fasa
