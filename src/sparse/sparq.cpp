#include <cmath>

#include "ops/attention.h"
#include "ops/kv_traffic.h"
#include "ops/topk.h"
#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view SparqPolicy::name() const { return "sparq"; }

void SparqPolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  const int D = kv.head_dim, r = r_ > 0 ? std::min(r_, D) : std::max(1, D / 4);
  thread_local std::vector<float> mag, score;
  thread_local std::vector<int32_t> dims;
  mag.resize(D);
  for (int d = 0; d < D; ++d) mag[d] = std::fabs(q.q[d]);
  top_k_indices(mag.data(), D, r, dims);
  score.resize(kv.n_tokens);
  for (int64_t j = 0; j < kv.n_tokens; ++j) {
    float s = 0;
    for (int i = 0; i < r; ++i) {
      const int d = dims[i];
      s += q.q[d] * kv.key(j, d);
    }
    score[j] = s;
  }
  // r dims of every key (this SparQ has no mean-value correction, so reads no values to select)
  count_kv_bytes_read(kv, (uint64_t)((double)kv.n_tokens * r * kv.key_row_bytes() / kv.head_dim));
  append_top_k(score.data(), kv.n_tokens, budget, 0, rows);
}

std::unique_ptr<AttentionPolicy> make_sparq_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<SparqPolicy>(o.budget, o.dense_layers, m.config.n_layer, o.sparq_r);
}

std::string sparq_settings(const PolicyOptions& o, const Model&) {
  return o.sparq_r > 0 ? "r=" + std::to_string(o.sparq_r) : "";
}

}  // namespace fasa
