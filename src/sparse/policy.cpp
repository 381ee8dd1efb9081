#include "sparse/policy.h"

#include <algorithm>
#include <sstream>

#include "calib/profile.h"
#include "model/model.h"
#include "sparse/baselines.h"
#include "sparse/fasa.h"
#include "fasa/error.h"

namespace fasa {

SparseSelector::SparseSelector(Budget budget, const std::vector<int>& dense_layers, int n_layer)
    : budget_(budget), dense_(n_layer, 0) {
  for (int l : dense_layers) {
    if (l < 0 || l >= n_layer) throw Error("--dense-layers: layer " + std::to_string(l) + " does not exist");
    dense_[l] = 1;
  }
}

bool SparseSelector::select(const AttentionQuery& query, const KvHeadView& kv, std::vector<int32_t>& rows) {
  bool sparse = false;
  select_group(&query, 1, kv, &rows, &sparse);
  return sparse;
}

void SparseSelector::select_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv,
                                  std::vector<int32_t>* rows, bool* sparse) {
  for (int i = 0; i < n_q; ++i) {
    rows[i].clear();
    sparse[i] = false;
  }
  if (dense_[queries[0].layer]) return;
  const int64_t budget = budget_.tokens(kv.n_tokens);
  if (budget >= kv.n_tokens) {
    for (int i = 0; i < n_q; ++i) on_dense_step(queries[i], kv);
    return;
  }
  std::fill(sparse, sparse + n_q, true);
  pick_group(queries, n_q, kv, budget, rows);
}

void SparseSelector::pick_rows(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                               std::vector<int32_t>* rows) {
  for (int i = 0; i < n_q; ++i) rows[i].clear();
  pick_group(queries, n_q, kv, budget, rows);
}

void SparseSelector::pick_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                                std::vector<int32_t>* rows) {
  for (int i = 0; i < n_q; ++i) pick(queries[i], kv, budget, rows[i]);
}

KeyLayout SparseSelector::key_layout(int layer, int kv_head) const {
  return dense_[layer] ? KeyLayout{} : sparse_key_layout(layer, kv_head);
}

std::vector<int> parse_layer_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0) throw Error("--dense-layers: '" + item + "' is not a layer number");
    out.push_back(v);
  }
  return out;
}

int fasa_chunks(const PolicyOptions& o, const Model& model) {
  if (!policy_info(o.attn).has_k_dom) return 0;
  if (o.fcs > 0) return o.fcs;
  return o.profile.empty() ? default_n_tip(model.config) : load_profile(o.profile).n_tip;
}

namespace {

// Options every sparse policy shares.
Budget budget_of(const PolicyOptions& o) { return Budget::parse(o.budget); }
std::vector<int> dense_of(const PolicyOptions& o) { return parse_layer_list(o.dense_layers); }

std::unique_ptr<TokenSelector> make_fasa(const PolicyOptions& o, const Model& model) {
  const ModelConfig& c = model.config;
  if (o.profile.empty() && !o.synthetic_profile)
    throw Error("--attn fasa needs --profile PROFILE (make one with `fasa calibrate`)");
  const Profile p = o.profile.empty() ? synthetic_profile(model, o.fcs > 0 ? o.fcs : default_n_tip(c), o.seed)
                                      : load_profile(o.profile);
  if (!o.profile.empty()) check_profile_matches(p, model, o.profile);
  FasaOptions f;
  f.budget = budget_of(o);
  f.n_tip = o.fcs;
  f.sharing = parse_fc_sharing(o.fc_sharing);
  f.dense_layers = dense_of(o);
  f.sink = o.sink;
  f.recent = o.recent;
  return std::make_unique<FasaSelector>(p, c, f);
}

const std::vector<PolicyInfo> kPolicies = {
    {"full", "dense attention over every cached token", true, false,
     [](const PolicyOptions&, const Model&) -> std::unique_ptr<TokenSelector> { return std::make_unique<FullAttention>(); }},
    {"oracle", "exact top tokens by full attention logits (upper bound)", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<OracleSelector>(budget_of(o), dense_of(o), m.config.n_layer);
     }},
    {"fasa", "score tokens on each head's dominant RoPE frequency chunks, attend exactly to the top ones", false, true,
     make_fasa},
    {"stream", "attention sinks plus a window of recent tokens", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<StreamSelector>(budget_of(o), dense_of(o), m.config.n_layer, stream_sink(o));
     }},
    {"snapkv", "keep tokens the last queries attended to (pooled), re-select periodically", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       const ModelConfig& c = m.config;
       return std::make_unique<SnapKvSelector>(budget_of(o), dense_of(o), c.n_layer, c.n_head, c.head_dim, o.snapkv_window,
                                               o.snapkv_every);
     }},
    {"quest", "the newest 16-token page plus the pages with the best min/max upper bound of q.k", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<QuestSelector>(budget_of(o), dense_of(o), m.config.n_layer, m.config.n_head_kv);
     }},
    {"h2o", "heavy hitters by accumulated attention plus recent tokens", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<H2oSelector>(budget_of(o), dense_of(o), m.config.n_layer, m.config.n_head);
     }},
    {"sparq", "approximate scores on the query's largest dims, then top tokens", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<SparqSelector>(budget_of(o), dense_of(o), m.config.n_layer, o.sparq_r);
     }},
    {"random", "uniformly random tokens (seeded)", false, false,
     [](const PolicyOptions& o, const Model& m) -> std::unique_ptr<TokenSelector> {
       return std::make_unique<RandomSelector>(budget_of(o), dense_of(o), m.config.n_layer, o.seed);
     }},
};

}  // namespace

const std::vector<PolicyInfo>& policy_registry() { return kPolicies; }

std::vector<std::string> selector_names() {
  std::vector<std::string> out;
  for (const PolicyInfo& p : kPolicies) out.push_back(p.name);
  return out;
}

const PolicyInfo& policy_info(const std::string& name) {
  for (const PolicyInfo& p : kPolicies)
    if (name == p.name) return p;
  std::string known;
  for (const PolicyInfo& p : kPolicies) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw Error("unknown attention policy '" + name + "' (known: " + known + ")");
}

std::unique_ptr<TokenSelector> make_selector(const PolicyOptions& o, const Model& model) {
  return policy_info(o.attn).make(o, model);
}

SessionOptions session_options(const PolicyOptions& policy, int64_t n_ctx) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.kv_type = kv_type_from_name(policy.kv_type);
  so.offload = parse_kv_offload(policy.kv_offload, policy.kv_fast_limit, policy.kv_prefetch);
  if (so.offload.tier != KvOffloadOptions::Tier::None && !policy_info(policy.attn).has_k_dom)
    throw Error("--kv-offload works with --attn fasa: its heads keep the K_dom plane they score on in fast memory");
  return so;
}

}  // namespace fasa
