#include "select/attention_policy.h"

namespace fasa {

bool select_one(AttentionPolicy& policy, const AttentionQuery& query, const KvHeadView& kv, std::vector<int32_t>& rows) {
  bool sparse = false;
  rows.clear();
  policy.select(&query, 1, kv, &rows, &sparse);
  return sparse;
}

}  // namespace fasa
