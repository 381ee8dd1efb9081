#pragma once
// Free generation (`fasa eval continuation`): what a user sees. Each prompt is a window of held-out
// text; full attention's greedy continuation is the reference, and each policy x budget continues the
// same prefill greedily. The record is how many leading tokens it shares with full's: where a policy
// goes its own way it rarely comes back, so the first differing token ends the comparison.
#include <cstdint>
#include <string>
#include <vector>

#include "eval/records.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace fasa {

struct ContinuationOptions {
  int64_t prompt_tokens = 4096;  // each prompt's length, its BOS included
  int prompts = 50;
  int tokens = 64;  // greedy tokens after each prompt
  int first = 16;   // "first_equal": the share of prompts whose first `first` tokens are full's
};

// `o.prompts` windows of `text`'s tokens, each of o.prompt_tokens, their starts evenly spread from the
// first token to the last window's (they overlap where the text is shorter than all of them end to end).
// Throws fasa::Error when the text is shorter than one prompt.
std::vector<std::vector<int32_t>> continuation_prompts(const Model& m, const std::string& text, const ContinuationOptions& o);

// For every policy x budget: "shared", the median count of leading tokens equal to full attention's
// continuation; "shared_mean"; "first_equal" (a share); "kv_kib", KV read per decoded token.
std::vector<EvalRecord> eval_continuation(const Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                          const PolicyOptions& base, const ContinuationOptions& o);

}  // namespace fasa
