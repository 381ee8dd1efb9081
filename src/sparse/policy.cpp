#include "sparse/policy.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <sstream>

#include "calib/auto_profile.h"
#include "calib/profile.h"
#include "model/model.h"
#include "fasa/error.h"

namespace fasa {

SparsePolicy::SparsePolicy(Budget budget, const std::vector<int>& dense_layers, int n_layer)
    : budget_(budget), dense_(n_layer, 0) {
  for (int l : dense_layers) {
    if (l < 0 || l >= n_layer)
      throw Error("dense_layers: layer " + std::to_string(l) + " does not exist (the model has " + std::to_string(n_layer) + ")");
    dense_[l] = 1;
  }
}

void SparsePolicy::select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
                          bool* sparse) {
  std::fill(sparse, sparse + n_q, false);
  if (dense_[queries[0].layer]) return;
  const int64_t budget = budget_.tokens(kv.n_tokens);
  if (budget >= kv.n_tokens) {
    for (int i = 0; i < n_q; ++i) on_dense_step(queries[i], kv);
    return;
  }
  std::fill(sparse, sparse + n_q, true);
  pick(queries, n_q, kv, budget, rows);
}

void SparsePolicy::pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                        std::vector<int32_t>* rows) {
  for (int i = 0; i < n_q; ++i) pick_head(queries[i], kv, budget, rows[i]);
}

void SparsePolicy::pick_head(const AttentionQuery&, const KvHeadView&, int64_t, std::vector<int32_t>&) {
  throw Error("policy '" + std::string(name()) + "' picks for a KV head's whole group only");
}

std::string SparsePolicy::summary() const { return std::string(name()) + ": budget " + budget_.describe() + " per head"; }

KeyLayout SparsePolicy::key_layout(int layer, int kv_head) const {
  return dense_[layer] ? KeyLayout{} : sparse_key_layout(layer, kv_head);
}

std::unique_ptr<AttentionPolicy> make_full_policy(const PolicyOptions&, const Model&, AutoProfileStore*) {
  return std::make_unique<FullAttention>();
}
std::string full_settings(const PolicyOptions&, const Model&) { return ""; }

// Each row's factory and settings, defined in the policy's own file; the factory throws fasa::Error on a
// bad option/profile.
#define FASA_POLICY(name, description, dense, has_k_dom, votes, gpu, takes)                                            \
  std::unique_ptr<AttentionPolicy> make_##name##_policy(const PolicyOptions& opts, const Model& model, AutoProfileStore* autos); \
  std::string name##_settings(const PolicyOptions& opts, const Model& model);
#include "sparse/policies.inc"
#undef FASA_POLICY

namespace {

// The built-in rows, then those registered; read and written under one lock.
struct Registry {
  std::mutex lock;
  std::vector<PolicyInfo> rows = {
#define FASA_POLICY(name, description, dense, has_k_dom, votes, gpu, takes) \
  {#name, description, dense, has_k_dom, make_##name##_policy, votes, gpu, name##_settings, takes},
#include "sparse/policies.inc"
#undef FASA_POLICY
  };
  const size_t n_built_in = rows.size();
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::vector<PolicyInfo> policy_registry() {
  std::lock_guard<std::mutex> hold(registry().lock);
  return registry().rows;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> out;
  for (const PolicyInfo& p : policy_registry()) out.push_back(p.name);
  return out;
}

bool takes_setting(const PolicyInfo& policy, std::string_view setting) {
  auto in = [&](const std::string& takes) {
    std::istringstream words(takes);
    for (std::string w; words >> w;)
      if (w == setting) return true;
    return false;
  };
  if (in(policy.takes)) return true;
  const std::vector<PolicyInfo> rows = policy_registry();
  return std::none_of(rows.begin(), rows.end(), [&](const PolicyInfo& p) { return in(p.takes); });
}

PolicyInfo policy_info(const std::string& name) {
  const std::vector<PolicyInfo> rows = policy_registry();
  for (const PolicyInfo& p : rows)
    if (name == p.name) return p;
  std::string known;
  for (const PolicyInfo& p : rows) known += (known.empty() ? "" : ", ") + p.name;
  throw Error("unknown attention policy '" + name + "' (known: " + known + ")");
}

void register_policy(PolicyInfo row) {
  const bool word = !row.name.empty() && std::all_of(row.name.begin(), row.name.end(), [](char c) {
    return std::isalnum((unsigned char)c) || c == '_' || c == '-';
  });
  if (!word) throw Error("a policy's name is letters, digits, '_' and '-' (as --attn's lists read it), got '" + row.name + "'");
  if (!row.make) throw Error("policy '" + row.name + "' has no factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> hold(r.lock);
  auto same = std::find_if(r.rows.begin(), r.rows.end(), [&](const PolicyInfo& p) { return p.name == row.name; });
  if (same - r.rows.begin() < (ptrdiff_t)r.n_built_in) throw Error("'" + row.name + "' is a built-in policy");
  if (same != r.rows.end()) *same = std::move(row);
  else r.rows.push_back(std::move(row));
}

std::unique_ptr<AttentionPolicy> make_policy(const PolicyOptions& o, const Model& model, AutoProfileStore* autos) {
  return policy_info(o.attn).make(o, model, autos);
}

bool auto_profile_pending(const PolicyOptions& o, const AutoProfileStore* autos) {
  return policy_info(o.attn).has_k_dom && wants_auto_profile(o) && !(autos && autos->find());
}

void check_policy(const PolicyOptions& o, const Model& model, AutoProfileStore* autos) {
  const SessionOptions so = session_options(o, 0);
  PolicyOptions checked = o;
  if (auto_profile_pending(o, autos)) {
    if (so.cache.offload.offloaded())
      throw Error("kv_offload: no profile of this model yet; give a profile (from `fasa calibrate`), or run once "
                  "without kv_offload on a prompt of at least " + std::to_string(PromptProfiler::kMinTokens) +
                  " tokens to make the automatic one");
    checked.synthetic_profile = true, checked.profile.clear();
  }
  make_policy(checked, model, autos);
}

SessionOptions session_options(const PolicyOptions& policy, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.cache = policy.cache;
  if (so.cache.offload.offloaded() && !policy_info(policy.attn).has_k_dom) {
    std::string k_dom;  // the registry's policies that keep a K_dom plane
    for (const PolicyInfo& p : policy_registry())
      if (p.has_k_dom) k_dom += (k_dom.empty() ? "'" : ", '") + p.name + "'";
    throw Error("kv_offload works with attn " + k_dom + ": their heads keep the K_dom plane they score on in fast memory");
  }
  return so;
}

}  // namespace fasa
