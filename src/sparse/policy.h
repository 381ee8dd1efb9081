#pragma once
// The sparse policies' common base and the factory that makes any policy by name.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fasa/options.h"
#include "model/session.h"
#include "select/attention_policy.h"

namespace fasa {

// Base of every sparse policy: layers listed as dense, and steps where the budget covers the whole
// cache, attend to everything; otherwise pick() chooses at most `budget` rows (exactly, but for FASA's
// adaptive budget). A policy overrides pick() where it scores a KV head's group at once (FASA,
// DoubleSparse), else pick_head().
class SparsePolicy : public AttentionPolicy {
 public:
  SparsePolicy(Budget budget, const std::vector<int>& dense_layers, int n_layer);
  void select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) final;
  KeyLayout key_layout(int layer, int kv_head) const final;
  std::string summary() const override;  // "stream: budget 50% of the context per head": what a run header shows
  // Fills each rows[i] (empty on entry) with at most `budget` (<= kv.n_tokens) distinct rows for the
  // query heads sharing one KV head. select() asks only where budget < kv.n_tokens; tests call it with
  // the whole context to check that a policy's own pick of every row is dense attention. Default:
  // pick_head() per head.
  virtual void pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                    std::vector<int32_t>* rows);

 protected:
  // pick() for one query head (the default pick() asks each head of the group in turn).
  virtual void pick_head(const AttentionQuery& query, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows);
  // A sparse layer's step that attends to everything (budget >= context); for stateful policies.
  virtual void on_dense_step(const AttentionQuery& /*query*/, const KvHeadView& /*kv*/) {}
  virtual KeyLayout sparse_key_layout(int /*layer*/, int /*kv_head*/) const { return {}; }
  bool is_dense_layer(int layer) const { return dense_[layer] != 0; }
  Budget budget_;

 private:
  std::vector<char> dense_;  // [n_layer]
};

struct Model;
class AutoProfileStore;

// Every attention policy, in one table: a row of sparse/policies.inc each, whose factory
// make_NAME_policy (declared in policy.cpp) is defined in the policy's own file; then the rows
// register_policy added at run time (Python's fasa.register_policy).
struct PolicyInfo {
  std::string name;
  std::string description;
  bool dense;      // attends to every token: no budget, and any cached prefix is exact to reuse
  bool has_k_dom;  // scores on a K_dom plane chosen by a profile (FASA, DoubleSparse): see policies.inc
  std::function<std::unique_ptr<AttentionPolicy>(const PolicyOptions& opts, const Model& model, AutoProfileStore* autos)> make;
  bool votes = false;  // remembers the queries it saw (H2O, SnapKV): see policies.inc
  bool gpu = false;    // selects on the Vulkan device too: see policies.inc
  // The settings that shape its choices, as evaluations label a run ("fcs=8 sharing=group"; "" for none;
  // may be empty for a registered policy).
  std::function<std::string(const PolicyOptions& opts, const Model& model)> settings = {};
  // The settings of its own it reads, space-separated set_policy_option names ("sparq_r"): see policies.inc.
  std::string takes = "";
};
// Copies of the rows (a row may be added while another thread reads them).
std::vector<PolicyInfo> policy_registry();
// The row of `name`; throws fasa::Error listing the known names.
PolicyInfo policy_info(const std::string& name);
// Adds a policy made outside the library, or replaces one added before, so that every place that
// takes a policy by name (contexts, evaluations, bench, the server) runs it. Throws fasa::Error on a
// built-in policy's name or a name other than letters, digits, '_' and '-'.
void register_policy(PolicyInfo row);
std::vector<std::string> policy_names();
// Whether a spec of `policy` may give `setting`: one of its own (PolicyInfo::takes), or one that no row
// takes (the budget, the cache's types: every policy's).
bool takes_setting(const PolicyInfo& policy, std::string_view setting);

// Policy by name; throws fasa::Error listing the known names, or on a bad option/profile. FASA's
// automatic profile comes from `autos` (the Engine's store; null: none, a profile file is needed).
std::unique_ptr<AttentionPolicy> make_policy(const PolicyOptions& opts, const Model& model, AutoProfileStore* autos);
// Whether `opts` ask for FASA with an automatic profile that no prompt has made yet in `autos`
// (calib/auto_profile.h): a context then prefills and decodes densely, measuring, until a prompt is long enough.
bool auto_profile_pending(const PolicyOptions& opts, const AutoProfileStore* autos);
// Throws fasa::Error when the options are invalid for this model (unknown name, bad budget, profile
// of another model...), without allocating a cache. A pending automatic profile is not an error.
void check_policy(const PolicyOptions& opts, const Model& model, AutoProfileStore* autos);
// The cache options of `policy` for a context of n_ctx tokens (0: the model's); throws fasa::Error
// on a bad value, or offloading without a policy that scores on a K_dom plane.
SessionOptions session_options(const PolicyOptions& policy, int64_t n_ctx);

}  // namespace fasa
