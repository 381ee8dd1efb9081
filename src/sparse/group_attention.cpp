#include "sparse/group_attention.h"

#include <algorithm>

#include "ops/attention.h"

namespace fasa {

constexpr int64_t kFirstRowsAhead = 32;  // rows of the next head asked for ahead

void decode_group_attention(TokenSelector& policy, int layer, int kv_head, int64_t pos, const KvHeadView& kv,
                            const float* q, int group, float scale, float* out, GroupAttentionScratch& s) {
  const int D = kv.head_dim;
  if ((int)s.queries.size() != group) {
    s.queries.resize(group);
    s.rows.resize(group);
    s.sparse = std::make_unique<bool[]>(group);
  }
  for (int i = 0; i < group; ++i) s.queries[i] = {layer, kv_head * group + i, kv_head, pos, q + (size_t)i * D};
  policy.select_group(s.queries.data(), group, kv, s.rows.data(), s.sparse.get());
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
