#include "select/group_attention.h"

#include <algorithm>
#include <numeric>

#include "ops/attention.h"

namespace fasa {

constexpr int64_t kFirstRowsAhead = 32;  // rows of the next head asked for ahead

namespace {

// Fetches the rows the group reads from an offloaded KV head and renumbers each sparse head's rows
// to the compact view returned; order is kept, so the arithmetic matches the resident cache's.
KvHeadView fetch_selection(const KvCache& cache, int layer, int kv_head, int64_t n_tokens, int group,
                           GroupAttentionScratch& s) {
  std::vector<int32_t>& all = s.fetched;
  all.clear();
  if (!std::all_of(s.sparse.get(), s.sparse.get() + group, [](bool b) { return b; })) {
    all.resize(n_tokens);  // a head attends to every row: fetch them all, numbered as they are
    std::iota(all.begin(), all.end(), 0);
    return cache.gather(layer, kv_head, all.data(), n_tokens, true, s.gathered);
  }
  for (int i = 0; i < group; ++i) all.insert(all.end(), s.rows[i].begin(), s.rows[i].end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  s.position.resize(n_tokens);  // only the entries of fetched rows are written and read
  for (size_t j = 0; j < all.size(); ++j) s.position[all[j]] = (int32_t)j;
  for (int i = 0; i < group; ++i)
    for (int32_t& r : s.rows[i]) r = s.position[r];
  return cache.gather(layer, kv_head, all.data(), (int64_t)all.size(), true, s.gathered);
}

}  // namespace

void decode_group_attention(AttentionPolicy& policy, int layer, int kv_head, int64_t pos, const KvCache& cache,
                            int cache_layer, const float* q, int group, float scale, float* out,
                            GroupAttentionScratch& s) {
  KvHeadView kv = cache.view(cache_layer, kv_head, pos + 1);
  const int D = kv.head_dim;
  if ((int)s.queries.size() != group) {
    s.queries.resize(group);
    s.rows.resize(group);
    s.sparse = std::make_unique<bool[]>(group);
  }
  for (int i = 0; i < group; ++i) {
    s.queries[i] = {layer, kv_head * group + i, kv_head, pos, q + (size_t)i * D};
    s.rows[i].clear();
  }
  policy.select(s.queries.data(), group, kv, s.rows.data(), s.sparse.get());
  if (cache.offloaded(cache_layer, kv_head)) kv = fetch_selection(cache, cache_layer, kv_head, kv.n_tokens, group, s);
  s.dense_q.clear();
  for (int i = 0; i < group; ++i)
    if (s.sparse[i]) {
      // The next head's first rows load while this head runs (later rows are prefetched block by
      // block inside).
      if (i + 1 < group && s.sparse[i + 1])
        prefetch_rows(kv, s.rows[i + 1].data(), 0, std::min<int64_t>(kFirstRowsAhead, (int64_t)s.rows[i + 1].size()));
      split_grouped_attention(q + (size_t)i * D, 1, kv, s.rows[i].data(), (int64_t)s.rows[i].size(), scale,
                              out + (size_t)i * D);  // large budgets: slices over threads
    } else {
      s.dense_q.insert(s.dense_q.end(), q + (size_t)i * D, q + (size_t)(i + 1) * D);
    }
  if (s.dense_q.empty()) return;
  const int n_dense = (int)(s.dense_q.size() / D);
  s.dense_out.resize(s.dense_q.size());
  split_grouped_attention(s.dense_q.data(), n_dense, kv, nullptr, kv.n_tokens, scale, s.dense_out.data());
  for (int i = 0, j = 0; i < group; ++i)
    if (!s.sparse[i]) std::copy_n(&s.dense_out[(size_t)j++ * D], D, out + (size_t)i * D);
}

}  // namespace fasa
