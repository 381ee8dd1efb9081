#include "select/attention_policy.h"

namespace fasa {

void AttentionPolicy::select_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv,
                                 std::vector<int32_t>* rows, bool* sparse) {
  for (int i = 0; i < n_q; ++i) {
    rows[i].clear();
    sparse[i] = select(queries[i], kv, rows[i]);
  }
}

}  // namespace fasa
