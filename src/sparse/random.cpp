#include <numeric>
#include <random>

#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view RandomPolicy::name() const { return "random"; }

void RandomPolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  std::seed_seq seq{(uint32_t)seed_, (uint32_t)(seed_ >> 32), (uint32_t)q.layer, (uint32_t)q.q_head, (uint32_t)q.pos};
  std::mt19937_64 rng(seq);
  thread_local std::vector<int32_t> idx;
  idx.resize(kv.n_tokens);
  std::iota(idx.begin(), idx.end(), 0);
  for (int64_t i = 0; i < budget; ++i) {  // partial Fisher-Yates
    std::uniform_int_distribution<int64_t> d(i, kv.n_tokens - 1);
    std::swap(idx[i], idx[d(rng)]);
    rows.push_back(idx[i]);
  }
}

std::unique_ptr<AttentionPolicy> make_random_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<RandomPolicy>(o.budget, o.dense_layers, m.config.n_layer, o.seed);
}

std::string random_settings(const PolicyOptions&, const Model&) { return ""; }

}  // namespace fasa
