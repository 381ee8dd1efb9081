#pragma once
// Token-by-token evaluation of a policy on text windows (selection applied before every
// prediction; no dense prefix — early positions whose context fits the budget are dense by nature).
// Against full attention at the same positions: mean NLL, KL divergence and top-1 agreement; and,
// in shadow mode, the policy's contextual agreement with the exact top-K on the dense trajectory.
#include <cstdint>
#include <string>
#include <vector>

#include "eval/records.h"
#include "model/model.h"
#include "eval/policy_runs.h"
#include "sparse/policy.h"

namespace fasa {

struct TextEvalOptions {
  int64_t n_ctx = 0;       // window length; 0: the model's training context
  int windows = 8;         // at most this many windows from the start of the text
  int64_t score_from = 0;  // positions before this are fed but not scored
};

// Windows of a text, each scored against full attention's logits from a dense prefill of it (made a
// chunk at a time as the positions are scored: a whole window's would be n * n_vocab floats, 34 GB for
// Gemma 3's 262K vocabulary at 32K tokens).
struct ReferenceRun {
  std::vector<std::vector<int32_t>> windows;  // [W][n]
};
ReferenceRun reference_run(const Model& m, const std::string& text, const TextEvalOptions& o);

// `eval ppl`: one record per metric (nll, ppl, kld, top1, and kv_kib: KV read per scored step) for every
// policy x budget. `policies` are
// specs over `base` ("fasa", "fasa:fcs=4": policy_runs.h), here and in every evaluation.
std::vector<EvalRecord> eval_perplexity(const Model& m, const ReferenceRun& ref, const std::vector<std::string>& policies,
                                        const std::vector<std::string>& budgets, const PolicyOptions& base,
                                        const TextEvalOptions& o);

// `eval ca`: each policy chooses K rows every step (budget = K) while decoding densely; the record is
// the mean share of the exact top-K it chose, over every sparse (layer, head, step).
std::vector<EvalRecord> eval_selection_agreement(const Model& m, const ReferenceRun& ref,
                                                 const std::vector<std::string>& policies,
                                                 const std::vector<int>& top_ks, const PolicyOptions& base,
                                                 const TextEvalOptions& o);

// Whether one of `runs` is FASA waiting for an automatic profile (auto_profile_pending).
bool auto_profile_wanted(const AutoProfileStore& autos, const std::vector<PolicyRun>& runs);
// FASA's automatic profile for an evaluation, whose prefills are shared: when one of `runs` wants it
// and `autos` has none yet, the first of `prompts` with at least PromptProfiler::kMinTokens tokens makes
// it (as a context's first long prompt would); where none is that long, the first prompts laid end to
// end (with a note). Throws fasa::Error when all of them together are shorter. Each
// evaluation runs with a store of its own (it finds the profile cached for the model on disk).
void prepare_auto_profile(AutoProfileStore& autos, const std::vector<PolicyRun>& runs,
                          const std::vector<std::vector<int32_t>>& prompts);

}  // namespace fasa
