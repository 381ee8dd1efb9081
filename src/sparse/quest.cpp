#include <algorithm>
#include <cmath>

#include "ops/kv_traffic.h"
#include "ops/topk.h"
#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view QuestPolicy::name() const { return "quest"; }

QuestPolicy::QuestPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head_kv)
    : SparsePolicy(b, dense, n_layer), n_head_kv_(n_head_kv) {
  for (int i = 0; i < n_layer * n_head_kv; ++i) stats_.push_back(std::make_unique<PageStats>());
}

namespace {
// Per-dim min and max of keys rows [r0, r1) into lo, hi ([head_dim]); keys in cache order.
void page_bounds(const KvHeadView& kv, int64_t r0, int64_t r1, float* lo, float* hi) {
  const int D = kv.head_dim;
  std::fill(lo, lo + D, INFINITY);
  std::fill(hi, hi + D, -INFINITY);
  for (int64_t r = r0; r < r1; ++r)
    for (int d = 0; d < D; ++d) {
      const float k = kv.key(r, d);
      lo[d] = std::min(lo[d], k);
      hi[d] = std::max(hi[d], k);
    }
}
}  // namespace

void QuestPolicy::pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  const int D = kv.head_dim;
  const int64_t n = kv.n_tokens, full_pages = n / kPage, last = (n - 1) / kPage;  // last: the newest token's page
  // The newest token's page is always read, as Quest's own kernels do: ranked by its min/max box, a
  // partial page would usually lose to older pages and the newest tokens be dropped. A budget below
  // a page keeps its newest rows.
  for (int64_t r = std::max(last * kPage, n - budget); r < n; ++r) rows.push_back((int32_t)r);
  // The rest of the budget, in whole pages, goes to the other pages with the best bounds.
  const int64_t more = std::min(last, (budget - (int64_t)rows.size()) / kPage);
  if (more <= 0) return;
  PageStats& st = *stats_[(size_t)q.layer * n_head_kv_ + q.kv_head];
  thread_local std::vector<float> score;  // [last]
  score.resize(last);
  {
    std::lock_guard<std::mutex> lock(st.mu);  // the query heads of one KV head share its page summaries
    if (st.pages > full_pages) st.pages = 0;  // a shorter cache without on_truncate: a new sequence
    st.lo.resize(full_pages * D);
    st.hi.resize(full_pages * D);
    // A completed page's keys are read once per KV head, to summarise it.
    count_kv_bytes_read(kv, (uint64_t)(full_pages - st.pages) * kPage * kv.key_row_bytes());
    for (; st.pages < full_pages; ++st.pages)
      page_bounds(kv, st.pages * kPage, (st.pages + 1) * kPage, &st.lo[st.pages * D], &st.hi[st.pages * D]);
    for (int64_t p = 0; p < last; ++p) {
      const float *l = &st.lo[p * D], *h = &st.hi[p * D];
      float s = 0;
      for (int d = 0; d < D; ++d) s += std::max(q.q[d] * l[d], q.q[d] * h[d]);
      score[p] = s;
    }
  }
  count_kv_bytes_read(kv, (uint64_t)last * 2 * D * sizeof(float));  // this head read every ranked page's summary
  thread_local std::vector<int32_t> chosen;
  chosen.clear();
  append_top_k(score.data(), last, more, 0, chosen);
  for (int32_t p : chosen)
    for (int64_t r = (int64_t)p * kPage; r < (int64_t)(p + 1) * kPage; ++r) rows.push_back((int32_t)r);
}

std::optional<DeviceSelection> QuestPolicy::device_selection(int n_layer) const {
  DeviceSelection s;
  s.kind = DeviceSelection::Kind::Quest;
  for (int l = 0; l < n_layer; ++l) s.dense.push_back(is_dense_layer(l));
  s.budget = budget_;
  s.page = kPage;
  return s;
}

void QuestPolicy::on_truncate(int64_t n_tokens) {
  for (auto& st : stats_) {  // summaries of pages that reach row n_tokens or beyond are stale
    std::lock_guard<std::mutex> lock(st->mu);
    st->pages = std::min(st->pages, n_tokens / kPage);
  }
}

std::unique_ptr<AttentionPolicy> make_quest_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<QuestPolicy>(o.budget, o.dense_layers, m.config.n_layer, m.config.n_head_kv);
}

std::string quest_settings(const PolicyOptions&, const Model&) { return ""; }

}  // namespace fasa
