#include "ops/attention.h"
#include "ops/kv_traffic.h"
#include "ops/topk.h"
#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view OraclePolicy::name() const { return "oracle"; }

void OraclePolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  thread_local std::vector<float> score;  // [n_tokens]
  score.resize(kv.n_tokens);
  for (int64_t j = 0; j < kv.n_tokens; ++j) score[j] = key_dot(q.q, kv, j);
  count_kv_bytes_read(kv, (uint64_t)kv.n_tokens * kv.key_row_bytes());  // every whole key, per head
  append_top_k(score.data(), kv.n_tokens, budget, 0, rows);
}

std::unique_ptr<AttentionPolicy> make_oracle_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<OraclePolicy>(o.budget, o.dense_layers, m.config.n_layer);
}

std::string oracle_settings(const PolicyOptions&, const Model&) { return ""; }

}  // namespace fasa
