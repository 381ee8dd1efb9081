#include <algorithm>
#include <cmath>

#include "ops/attention.h"
#include "ops/kv_traffic.h"
#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view H2oPolicy::name() const { return "h2o"; }

H2oPolicy::H2oPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head)
    : SparsePolicy(b, dense, n_layer), n_head_(n_head), heads_((size_t)n_layer * n_head) {}

// Adds this query's attention probabilities over the rows it reads to their accumulated scores.
void H2oPolicy::accumulate(HeadState& s, const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n) {
  if ((int64_t)s.acc.size() > kv.n_tokens) s = HeadState{};  // a new sequence: start over
  s.acc.resize(kv.n_tokens, 0.0);
  s.kept.resize(kv.n_tokens, 1);
  thread_local std::vector<double> p;
  p.resize(n);
  attention_weights(q, kv, rows, n, p.data());
  for (int64_t j = 0; j < n; ++j) s.acc[rows ? rows[j] : j] += p[j];
  count_kv_bytes_read(kv, (uint64_t)n * sizeof(double));  // the scores updated (the keys: attention_weights)
}

void H2oPolicy::observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  if (is_dense_layer(layer)) return;
  const int D = cache.head_dim(), per_kv = n_head_ / cache.n_head_kv();
#pragma omp parallel for schedule(dynamic)
  for (int h = 0; h < n_head_; ++h) {
    HeadState& s = heads_[(size_t)layer * n_head_ + h];
    for (int t = 0; t < n; ++t) {
      const KvHeadView kv = cache.view(layer, h / per_kv, p0 + t + 1);
      accumulate(s, q + ((size_t)t * n_head_ + h) * D, kv, nullptr, kv.n_tokens);
    }
  }
}

void H2oPolicy::on_dense_step(const AttentionQuery& q, const KvHeadView& kv) {
  accumulate(heads_[(size_t)q.layer * n_head_ + q.q_head], q.q, kv, nullptr, kv.n_tokens);
}

// Rows >= n_tokens go. The kept rows' scores keep the votes of the forgotten queries (undoing them
// would take every step's weights), and the evictions among them stand, as in a cache that freed them.
void H2oPolicy::on_truncate(int64_t n_tokens) {
  for (HeadState& s : heads_)
    if ((int64_t)s.acc.size() > n_tokens) {
      s.acc.resize(n_tokens);
      s.kept.resize(n_tokens);
    }
}

void H2oPolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  HeadState& s = heads_[(size_t)q.layer * n_head_ + q.q_head];
  if ((int64_t)s.acc.size() > kv.n_tokens) s = HeadState{};
  s.acc.resize(kv.n_tokens, 0.0);
  s.kept.resize(kv.n_tokens, 1);
  // Half the budget is the recent window; evict the weakest older tokens until the rest fits.
  const int64_t recent = std::max<int64_t>(1, budget / 2), first_recent = kv.n_tokens - recent;
  int64_t kept = 0;
  for (char k : s.kept) kept += k;
  uint64_t state_bytes = 2 * (uint64_t)kv.n_tokens;  // the kept flags, read twice: summed above, listed below
  if (kept > budget) {
    // Evict the kept - budget weakest older tokens (ties: the earlier first) in one pass: the same set as
    // evicting the weakest one at a time, as the scores do not change in between, in O(n) and not O(n^2)
    // (the first decode step after a long prefill evicts almost all of it).
    thread_local std::vector<int32_t> older;
    older.clear();
    for (int64_t j = 0; j < first_recent; ++j)
      if (s.kept[j]) older.push_back((int32_t)j);
    state_bytes += first_recent + older.size() * sizeof(double);
    const size_t evict = (size_t)std::min<int64_t>(kept - budget, (int64_t)older.size());
    auto weaker = [&s](int32_t a, int32_t b) { return s.acc[a] < s.acc[b] || (s.acc[a] == s.acc[b] && a < b); };
    if (evict < older.size()) std::nth_element(older.begin(), older.begin() + evict, older.end(), weaker);
    for (size_t i = 0; i < evict; ++i) s.kept[older[i]] = 0;
  }
  for (int64_t j = 0; j < kv.n_tokens; ++j)
    if (s.kept[j]) rows.push_back((int32_t)j);
  count_kv_bytes_read(kv, state_bytes);
  accumulate(s, q.q, kv, rows.data(), (int64_t)rows.size());
}

std::unique_ptr<AttentionPolicy> make_h2o_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<H2oPolicy>(o.budget, o.dense_layers, m.config.n_layer, m.config.n_head);
}

std::string h2o_settings(const PolicyOptions&, const Model&) { return ""; }

}  // namespace fasa
