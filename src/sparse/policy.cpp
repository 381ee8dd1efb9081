#include "sparse/policy.h"

#include <algorithm>
#include <sstream>

#include "calib/profile.h"
#include "model/model.h"
#include "sparse/baselines.h"
#include "sparse/fasa_policy.h"
#include "fasa/error.h"

namespace fasa {

SparseSelector::SparseSelector(Budget budget, const std::vector<int>& dense_layers, int n_layer)
    : budget_(budget), dense_(n_layer, 0) {
  for (int l : dense_layers) {
    if (l < 0 || l >= n_layer) throw Error("--dense-layers: layer " + std::to_string(l) + " does not exist");
    dense_[l] = 1;
  }
}

void TokenSelector::select_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv,
                                 std::vector<int32_t>* rows, bool* sparse) {
  for (int i = 0; i < n_q; ++i) {
    rows[i].clear();
    sparse[i] = select(queries[i], kv, rows[i]);
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

std::vector<std::string> selector_names() {
  return {"full", "oracle", "fasa", "stream", "snapkv", "quest", "h2o", "sparq", "random"};
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
  if (o.attn != "fasa") return 0;
  if (o.fcs > 0) return o.fcs;
  return o.profile.empty() ? default_n_tip(model.config) : load_profile(o.profile).n_tip;
}

std::unique_ptr<TokenSelector> make_selector(const PolicyOptions& o, const Model& model) {
  const ModelConfig& c = model.config;
  if (o.attn == "full") return std::make_unique<FullAttention>();
  const Budget b = Budget::parse(o.budget);
  const std::vector<int> dense = parse_layer_list(o.dense_layers);
  if (o.attn == "oracle") return std::make_unique<OracleSelector>(b, dense, c.n_layer);
  if (o.attn == "stream") return std::make_unique<StreamSelector>(b, dense, c.n_layer, o.sink > 0 ? o.sink : 8);
  if (o.attn == "random") return std::make_unique<RandomSelector>(b, dense, c.n_layer, o.seed);
  if (o.attn == "quest") return std::make_unique<QuestSelector>(b, dense, c.n_layer, c.n_head_kv);
  if (o.attn == "sparq") return std::make_unique<SparqSelector>(b, dense, c.n_layer, o.sparq_r);
  if (o.attn == "h2o") return std::make_unique<H2oSelector>(b, dense, c.n_layer, c.n_head);
  if (o.attn == "snapkv")
    return std::make_unique<SnapKvSelector>(b, dense, c.n_layer, c.n_head, c.head_dim, o.snapkv_window, o.snapkv_every);
  if (o.attn == "fasa") {
    if (o.profile.empty() && !o.synthetic_profile)
      throw Error("--attn fasa needs --profile PROFILE (make one with `fasa calibrate`)");
    const Profile p = o.profile.empty() ? synthetic_profile(model, o.fcs > 0 ? o.fcs : default_n_tip(c), o.seed)
                                        : load_profile(o.profile);
    if (!o.profile.empty()) check_profile_matches(p, model, o.profile);
    FasaOptions f;
    f.budget = b;
    f.n_tip = o.fcs;
    f.sharing = parse_fc_sharing(o.fc_sharing);
    f.dense_layers = dense;
    f.sink = o.sink;
    f.recent = o.recent;
    return std::make_unique<FasaSelector>(p, model.config, f);
  }
  std::string known;
  for (auto& n : selector_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown attention policy '" + o.attn + "' (known: " + known + ")");
}

}  // namespace fasa
