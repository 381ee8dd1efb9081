#pragma once
// One prompt prefilled once with full attention, from which every policy of an evaluation goes on
// (Session::start_from_prefill): the prompt's work is done once however many policies and budgets run.
#include <memory>
#include <vector>

#include "fasa/options.h"
#include "model/model.h"
#include "model/session.h"

namespace fasa {

class AttentionPolicy;

struct SharedPrefill {
  std::vector<int32_t> prompt;
  int max_new = 0;                           // tokens a policy may generate after it
  std::unique_ptr<Session> dense;            // after the prompt, with room for max_new more tokens
  std::vector<std::vector<float>> queries;   // [n_layer][prompt.size() * n_head * head_dim]
};
SharedPrefill prefill_for_policies(const Model& m, std::vector<int32_t> prompt, int max_new);

// A session of `policy` (cache types from `po`) in the state the shared prefill left.
std::unique_ptr<Session> start_from(const Model& m, std::shared_ptr<AttentionPolicy> policy, const PolicyOptions& po,
                                    const SharedPrefill& pre);

}  // namespace fasa
