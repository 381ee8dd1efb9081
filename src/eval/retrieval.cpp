#include "eval/retrieval.h"

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "calib/auto_profile.h"
#include "eval/policy_runs.h"
#include "eval/decode_eval.h"
#include "eval/json_lines.h"
#include "eval/shared_prefill.h"
#include "model/chat_template.h"
#include "model/sampler.h"
#include "model/session.h"
#include "fasa/error.h"
#include "util/progress.h"

namespace fasa {

std::vector<RetrievalTask> load_retrieval_tasks(const std::string& path, int per_type) {
  std::vector<RetrievalTask> tasks;
  std::map<std::string, int> count;
  for_each_json_line(path, "tasks", [&](const nlohmann::json& j, int ln) {
    RetrievalTask t;
    t.type = string_field(j, "type", path, ln);
    t.prompt = string_field(j, "prompt", path, ln);
    t.answer = string_field(j, "answer", path, ln);
    t.id = line_id(j, ln);
    if (t.answer.empty()) fail_line(path, ln, "empty answer");
    if (per_type > 0 && count[t.type]++ >= per_type) return;
    tasks.push_back(std::move(t));
  });
  return tasks;
}

namespace {

// A task's prompt without its trailing whitespace (the space an answer follows).
std::string prompt_text(const RetrievalTask& t) { return t.prompt.substr(0, t.prompt.find_last_not_of(" \t\r\n") + 1); }

}  // namespace

std::vector<RetrievalTask> tasks_with_answers_of_at_least(const Model& m, std::vector<RetrievalTask> tasks, int min_tokens) {
  if (min_tokens < 1) throw Error("min_answer_tokens: must be at least 1, not " + std::to_string(min_tokens));
  if (min_tokens == 1) return tasks;
  std::erase_if(tasks, [&](const RetrievalTask& t) {
    const std::string prompt = prompt_text(t);  // answers follow a space
    const size_t alone = m.tokenizer.encode(prompt, true).size();
    return m.tokenizer.encode(prompt + " " + t.answer, true).size() < alone + (size_t)min_tokens;
  });
  if (tasks.empty()) throw Error("no task's answer takes " + std::to_string(min_tokens) + " tokens or more");
  return tasks;
}

namespace {

// Whether `v` occurs in `text` as a whole word: no letter or digit right before or after it ("4884" is
// not in "48845", nor the made-up word "kavo" in "kavoti").
bool contains_word(const std::string& text, const std::string& v) {
  auto alnum = [](char c) { return std::isalnum((unsigned char)c) != 0; };
  for (size_t at = text.find(v); at != std::string::npos; at = text.find(v, at + 1))
    if ((at == 0 || !alnum(text[at - 1])) && (at + v.size() == text.size() || !alnum(text[at + v.size()]))) return true;
  return false;
}

}  // namespace

std::vector<RetrievalTask> in_chat_format(const Model& m, std::vector<RetrievalTask> tasks) {
  const ChatStyle style = chat_style(m);
  for (RetrievalTask& t : tasks) {
    t.prompt = render_chat(style, {{"user", prompt_text(t)}});
    t.chat = true;
  }
  return tasks;
}

bool answer_exact(const RetrievalTask& t, const std::string& text) {
  if (t.chat) return contains_word(text, t.answer);
  const size_t start = text.find_first_not_of(" \t\n\r");
  return start != std::string::npos && text.compare(start, t.answer.size(), t.answer) == 0;
}

double answer_score(const RetrievalTask& t, const std::string& text) {
  if (t.values.empty()) return answer_exact(t, text) ? 1 : 0;
  size_t found = 0;
  for (const auto& v : t.values) found += contains_word(text, v);
  return (double)found / (double)t.values.size();
}

namespace {

// One task's prompt, prefilled once with full attention; every policy starts from it. It generates
// as many tokens as the answer takes, and two more (a UUID, ten words: at most 96).
// A chat task's prompt holds the template's special tokens, and its reply may say something before the
// answer: 24 more tokens.
SharedPrefill prefill(const Model& m, const RetrievalTask& t) {
  const Tokenizer& tok = m.tokenizer;
  const int answer = (int)tok.encode(t.answer, false).size();
  return prefill_for_policies(m, tok.encode(t.prompt, t.bos && tok.add_bos(), t.chat), std::min<int>(96, answer + (t.chat ? 24 : 2)));
}

// A greedy answer, and the KV bytes its decode steps read (attention and selection: ops/kv_traffic.h).
struct Answer {
  std::string text;
  uint64_t kv_bytes = 0;
  int steps = 0;
};

// Greedy answer with `policy` from the shared prefill (its cached rows rounded to the options' KV
// types), as long as the task's answer.
Answer greedy_answer(const Model& m, std::shared_ptr<AttentionPolicy> policy, const PolicyOptions& po,
                     const SharedPrefill& pre, const RetrievalTask& t) {
  const Tokenizer& tok = m.tokenizer;
  const auto session = start_from(m, std::move(policy), po, pre);
  Session& s = *session;
  std::span<const float> logits = s.logits();
  Answer a;
  const uint64_t read_before = s.cache().bytes_read();
  for (int i = 0; i < pre.max_new; ++i) {
    const int32_t next = argmax(logits);
    if (tok.is_end_of_generation(next)) break;
    a.text += tok.token_text(next);
    const size_t start = a.text.find_first_not_of(" \t\n\r");
    if (!t.chat && start != std::string::npos && a.text.size() - start >= t.answer.size()) break;  // long enough to judge
    if (i + 1 < pre.max_new) {
      logits = s.decode(next);
      ++a.steps;
    }
  }
  a.kv_bytes = s.cache().bytes_read() - read_before;
  return a;
}

// A task type's sums over its tasks.
struct Tally {
  double score = 0;
  int exact = 0, n = 0;
  uint64_t kv_bytes = 0;  // read by the decode steps
  int64_t steps = 0;
  bool has_values = false;  // some task asks for several values: "exact" differs from "accuracy"
};

// tally[run][budget][type]
using Tallies = std::vector<std::map<std::string, std::map<std::string, Tally>>>;

// Types a task counts in: its own, "all", and for generated tasks ("KIND@LENGTH") "all@LENGTH".
std::vector<std::string> task_groups(const RetrievalTask& t) {
  std::vector<std::string> g = {t.type, "all"};
  if (const size_t at = t.type.find('@'); at != std::string::npos) g.push_back("all" + t.type.substr(at));
  return g;
}

// Every type the tasks count in, in order of first appearance, "all" last.
std::vector<std::string> reported_types(const std::vector<RetrievalTask>& tasks) {
  std::vector<std::string> types;
  for (auto& t : tasks)
    for (const auto& g : task_groups(t))
      if (g != "all" && std::find(types.begin(), types.end(), g) == types.end()) types.push_back(g);
  types.push_back("all");
  return types;
}

// Prompts of running text, enough to make FASA's automatic profile; throws where the tasks have none.
std::vector<std::vector<int32_t>> profile_prompts(const Model& m, const std::vector<RetrievalTask>& tasks) {
  std::vector<std::vector<int32_t>> natural;
  bool unnatural = false;  // a prompt of look-alike needles or a word list was passed over
  for (size_t i = 0, tokens = 0; i < tasks.size() && (int64_t)tokens < PromptProfiler::kMinTokens; ++i) {
    if (!tasks[i].natural_context) {
      unnatural = true;
      continue;
    }
    natural.push_back(m.tokenizer.encode(tasks[i].prompt, tasks[i].bos && m.tokenizer.add_bos(), tasks[i].chat));
    tokens += natural.back().size();
  }
  if (natural.empty() && unnatural)
    throw Error("no automatic profile yet, and these tasks' contexts are look-alike needles or word lists (cwe, fwe), "
                "which would make a poor one (it is kept and cached for the model): give a profile (from `fasa "
                "calibrate`), or run other tasks once without --distractors");
  return natural;
}

// Task t answered by every run at every budget from one shared prefill, counted in `tally`.
void eval_task(const Model& m, const RetrievalTask& t, const std::vector<PolicyRun>& runs,
               const std::vector<std::string>& budgets, AutoProfileStore& autos, Tallies& tally,
               std::vector<RetrievalAnswer>* answers) {
  const SharedPrefill pre = prefill(m, t);
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& budget : budgets) {
      PolicyOptions po = runs[r].options;
      po.budget = Budget::parse(budget);
      const Answer a = greedy_answer(m, make_policy(po, m, &autos), po, pre, t);
      const double score = answer_score(t, a.text);
      const bool exact = answer_exact(t, a.text);
      if (answers) answers->push_back({t.id, t.type, runs[r].name, runs[r].variant, budget, t.answer, a.text, score});
      for (const std::string& type : task_groups(t)) {
        Tally& y = tally[r][budget][type];
        y.score += score;
        y.exact += exact;
        y.kv_bytes += a.kv_bytes;
        y.steps += a.steps;
        y.n += 1;
        y.has_values |= !t.values.empty();
      }
    }
}

// The records: every "accuracy" table, then the "exact" and "kv_kib" ones. (`tally` by value: a type
// no task counted in reads as an empty Tally, as operator[] makes it.)
std::vector<EvalRecord> tally_records(Tallies tally, const std::vector<PolicyRun>& runs,
                                      const std::vector<std::string>& budgets, const std::vector<std::string>& types) {
  std::vector<EvalRecord> out, exact, read;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& budget : budgets) {
      const std::string &name = runs[r].name, &variant = runs[r].variant;
      for (const auto& type : types) {
        const Tally& y = tally[r][budget][type];
        out.push_back({"retrieval", name, variant, budget, "accuracy", type, 0, y.score / y.n, y.n});
        if (y.has_values) exact.push_back({"retrieval", name, variant, budget, "exact", type, 0, (double)y.exact / y.n, y.n});
        if (type == "all" && y.steps > 0)  // KV read per decoded token, over every task: what a budget saves
          read.push_back({"retrieval", name, variant, budget, "kv_kib", type, 0, (double)y.kv_bytes / 1024.0 / (double)y.steps, y.steps});
      }
    }
  out.insert(out.end(), exact.begin(), exact.end());
  out.insert(out.end(), read.begin(), read.end());
  return out;
}

}  // namespace

std::vector<EvalRecord> eval_retrieval(const Model& m, const std::vector<RetrievalTask>& tasks,
                                       const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                       const PolicyOptions& base, std::vector<RetrievalAnswer>* answers) {
  const std::vector<std::string> types = reported_types(tasks);
  AutoProfileStore autos(m);  // this run's (with the model's cached file)
  const std::vector<PolicyRun> runs = policy_runs(m, policies, base);
  prepare_auto_profile(autos, runs, auto_profile_wanted(autos, runs) ? profile_prompts(m, tasks)
                                                                      : std::vector<std::vector<int32_t>>{});
  Tallies tally(runs.size());  // each prompt is prefilled once for all policies
  ProgressBar bar("retrieval", (int64_t)tasks.size());
  for (const auto& t : tasks) {
    eval_task(m, t, runs, budgets, autos, tally, answers);
    bar.advance();
  }
  return tally_records(std::move(tally), runs, budgets, types);
}

void write_retrieval_answers(const std::vector<RetrievalAnswer>& answers, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& a : answers)
    out << nlohmann::json{{"id", a.task_id},       {"type", a.type},     {"policy", a.policy}, {"variant", a.variant},
                          {"budget", a.budget},     {"expected", a.expected}, {"answer", a.answer}, {"score", a.score}}
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
  if (!out) fail(path, "cannot write answers");
}

}  // namespace fasa
