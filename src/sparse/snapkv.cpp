#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/attention.h"
#include "ops/kv_traffic.h"
#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view SnapKvPolicy::name() const { return "snapkv"; }

SnapKvPolicy::SnapKvPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head, int head_dim,
                               int window, int every)
    : SparsePolicy(b, dense, n_layer), n_head_(n_head), head_dim_(head_dim), window_(std::max(1, window)),
      every_(every), heads_((size_t)n_layer * n_head) {}

void SnapKvPolicy::remember(HeadState& s, int64_t pos, const float* q) {
  if (!s.window.empty() && s.window.back().first >= pos) s = HeadState{};  // a new sequence
  s.window.emplace_back(pos, std::vector<float>(q, q + head_dim_));
  while ((int)s.window.size() > window_) s.window.pop_front();
}

void SnapKvPolicy::observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  if (is_dense_layer(layer)) return;
  // The prompt's last queries form the first observation window (identity key layout: model order).
  for (int h = 0; h < n_head_; ++h)
    for (int t = std::max(0, n - window_); t < n; ++t)
      remember(heads_[(size_t)layer * n_head_ + h], p0 + t, q + ((size_t)t * n_head_ + h) * cache.head_dim());
}

void SnapKvPolicy::on_truncate(int64_t n_tokens) {
  for (HeadState& s : heads_) {
    while (!s.window.empty() && s.window.back().first >= n_tokens) s.window.pop_back();  // forgotten tokens' queries
    if (s.selected_at > n_tokens) {  // ranked over rows that are gone: select again
      s.ranked.clear();
      s.selected_at = -1;
    }
  }
}

void SnapKvPolicy::on_dense_step(const AttentionQuery& q, const KvHeadView&) {
  remember(heads_[(size_t)q.layer * n_head_ + q.q_head], q.pos, q.q);
}

// Ranks the rows before the window by the window's summed attention, max-pooled over 7 neighbours;
// the window's own rows rank first.
void SnapKvPolicy::reselect(HeadState& s, const KvHeadView& kv) {
  const int64_t n = kv.n_tokens, w0 = std::max<int64_t>(0, s.window.front().first);
  std::vector<double> vote(w0, 0.0), p(n);
  for (const auto& [pos, qv] : s.window) {
    attention_weights(qv.data(), kv, nullptr, std::min<int64_t>(pos + 1, n), p.data());
    for (int64_t j = 0; j < w0; ++j) vote[j] += p[j];
  }
  std::vector<float> pooled(w0);
  for (int64_t j = 0; j < w0; ++j) {
    double v = 0;
    for (int64_t k = std::max<int64_t>(0, j - 3); k <= std::min<int64_t>(w0 - 1, j + 3); ++k) v = std::max(v, vote[k]);
    pooled[j] = (float)v;
  }
  s.ranked.clear();
  for (int64_t j = n - 1; j >= w0; --j) s.ranked.push_back((int32_t)j);
  std::vector<int32_t> order(w0);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pooled[a] > pooled[b] || (pooled[a] == pooled[b] && a < b); });
  s.ranked.insert(s.ranked.end(), order.begin(), order.end());
  s.selected_at = n;
}

void SnapKvPolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  HeadState& s = heads_[(size_t)q.layer * n_head_ + q.q_head];
  remember(s, q.pos, q.q);
  const int64_t n = kv.n_tokens;
  // Tokens after the selection are all kept; the ranked list fills what remains of the budget.
  // Re-select when the period is up or the ranked share would fall below half the budget.
  const int64_t since = n - s.selected_at;
  if (s.selected_at < 0 || since < 0 || (every_ > 0 && since >= every_) || budget - since < budget / 2) reselect(s, kv);
  const int64_t fresh = n - s.selected_at;
  for (int64_t r = s.selected_at; r < n; ++r) rows.push_back((int32_t)r);
  const int64_t from_ranked = std::clamp<int64_t>(budget - fresh, 0, (int64_t)s.ranked.size());
  for (int64_t i = 0; i < from_ranked; ++i) rows.push_back(s.ranked[i]);
  count_kv_bytes_read(kv, (uint64_t)from_ranked * sizeof(int32_t));  // the ranking (its keys: attention_weights)
}

std::unique_ptr<AttentionPolicy> make_snapkv_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  const ModelConfig& c = m.config;
  return std::make_unique<SnapKvPolicy>(o.budget, o.dense_layers, c.n_layer, c.n_head, c.head_dim,
                                          o.snapkv_window, o.snapkv_every);
}

std::string snapkv_settings(const PolicyOptions& o, const Model&) {
  if (const PolicyOptions d; o.snapkv_window == d.snapkv_window && o.snapkv_every == d.snapkv_every) return "";
  return "window=" + std::to_string(o.snapkv_window) + " every=" + std::to_string(o.snapkv_every);
}

}  // namespace fasa
