#pragma once
// Multiple-choice items scored by log-likelihood (`fasa eval choice`), as lm-evaluation-harness scores a
// multiple_choice task against a completions API: each choice's continuation tokens are the context and
// choice encoded together less the context's own (the context's trailing whitespace moved onto the
// choice), and the item's answer is the choice whose tokens have the highest summed log-probability.
// Every token is decoded with the policy (no dense prefix), as `fasa serve --echo-policy` scores an
// echoed prompt, so a harness reading that server chooses what this chooses.
#include <string>
#include <vector>

#include "eval/records.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace fasa {

struct ChoiceItem {
  std::string id, context;
  std::string where;  // "FILE: line N", for errors about the item
  std::vector<std::string> choices;
  int gold = 0;  // index of the right choice
};

// JSON lines {"id"?, "context", "choices": [...], "gold"}; throws fasa::Error naming the file and line.
std::vector<ChoiceItem> load_choice_items(const std::string& path);

// One item's scores under one policy and budget.
struct ChoiceAnswer {
  std::string item_id, policy, variant, budget;
  std::vector<double> loglikelihoods;  // [choices]
  int chosen = 0, gold = 0;
};

// "accuracy" (the share of items whose highest-scoring choice is the gold one) for every policy x
// budget. `bos`: a BOS token before each context where the model asks for one (false: as the harness
// sends token ids, without). With `answers`, every item's scores are appended there too.
std::vector<EvalRecord> eval_choice(const Model& m, const std::vector<ChoiceItem>& items,
                                    const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                    const PolicyOptions& base, bool bos, std::vector<ChoiceAnswer>* answers = nullptr);
void write_choice_answers(const std::vector<ChoiceAnswer>& answers, const std::string& path);

}  // namespace fasa
