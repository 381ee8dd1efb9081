#pragma once
// Retrieval tasks (../shared/eval/retrieval.jsonl): prefill the prompt, greedy-decode, and judge by
// whether the text, leading whitespace removed, starts with the answer.
#include <string>
#include <vector>

#include "eval/records.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace fasa {

struct RetrievalTask {
  std::string id, type, prompt, answer;  // type: the public file's type, or "KIND@LENGTH" when generated
};

// Throws fasa::Error naming the file and line on a malformed task. At most `per_type` tasks of each
// type (0: all), in file order.
std::vector<RetrievalTask> load_retrieval_tasks(const std::string& path, int per_type = 0);

// Accuracy per task type and overall ("all") for every policy x budget.
std::vector<EvalRecord> eval_retrieval(const Model& m, const std::vector<RetrievalTask>& tasks,
                                       const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                       const PolicyOptions& base);

}  // namespace fasa
