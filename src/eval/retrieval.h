#pragma once
// Retrieval tasks (../shared/eval/retrieval.jsonl, or generated): prefill the prompt, greedy-decode, and
// judge by whether the text, leading whitespace removed, starts with the answer; a task that asks for
// several values scores the share of them its answer contains, as RULER scores its multi-value tasks.
#include <string>
#include <vector>

#include "eval/records.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace fasa {

struct RetrievalTask {
  std::string id, type, prompt, answer;  // type: the public file's type, or "KIND@LENGTH" when generated
  std::vector<std::string> values;       // when asked for several, each value (answer: all, in order)
  // Its context is text as any prompt's, not look-alike needles or a word list: an automatic profile
  // (kept for the run and cached per model) may be measured on it.
  bool natural_context = true;
  // The prompt is a user turn in the model's chat format (in_chat_format): an instruct model answers in
  // a sentence, so the answer counts wherever it stands in the reply, as a whole word.
  bool chat = false;
  bool bos = true;  // a BOS before the prompt where the model asks for one (false: as a harness sends token ids)
};

// The tasks as an instruct model is asked: each prompt a user turn in the model's chat format (its
// template, ending where the assistant's reply begins), answers judged anywhere in the reply.
std::vector<RetrievalTask> in_chat_format(const Model& m, std::vector<RetrievalTask> tasks);

// The tasks whose answer takes at least `min_tokens` tokens after the prompt (prompt, a space and the
// answer encoded together, less the prompt's own tokens; the prompt's trailing whitespace left out).
// A one-token answer is the dense prefill's last prediction, the same under every policy: leaving
// those out shows where policies differ. Throws fasa::Error when none is left or min_tokens < 1.
std::vector<RetrievalTask> tasks_with_answers_of_at_least(const Model& m, std::vector<RetrievalTask> tasks, int min_tokens);

// A greedy answer's score in [0, 1]: whether `text` starts with the task's answer (a chat task: holds it
// as whole words), or for a task with values the share of them found anywhere in `text` as whole words
// (RULER's string_match_all).
double answer_score(const RetrievalTask& t, const std::string& text);
// Whether `text`, leading whitespace removed, starts with the whole answer (a chat task: holds it).
bool answer_exact(const RetrievalTask& t, const std::string& text);

// Throws fasa::Error naming the file and line on a malformed task. At most `per_type` tasks of each
// type (0: all), in file order.
std::vector<RetrievalTask> load_retrieval_tasks(const std::string& path, int per_type = 0);

// One task's greedy answer under one policy and budget, beside the expected one: what lies behind a score.
struct RetrievalAnswer {
  std::string task_id, type, policy, variant, budget, expected, answer;
  double score = 0;
};

// Mean score ("accuracy") per task type and overall ("all") for every policy x budget; where a type holds
// tasks with values, also the share answered whole and in order ("exact"); and the KV bytes read per
// decoded token ("kv_kib", over all tasks). With `answers`, every task's answer is appended there too.
std::vector<EvalRecord> eval_retrieval(const Model& m, const std::vector<RetrievalTask>& tasks,
                                       const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                       const PolicyOptions& base, std::vector<RetrievalAnswer>* answers = nullptr);
// The answers as JSON lines (id, type, policy, variant, budget, expected, answer, score), one per answer.
void write_retrieval_answers(const std::vector<RetrievalAnswer>& answers, const std::string& path);

}  // namespace fasa
