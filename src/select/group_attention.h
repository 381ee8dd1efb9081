#pragma once
// One decode step's attention for the query heads that share a KV head (GQA): the policy picks each
// head's rows, sparse heads run gathered attention over theirs, and the heads that attend to every
// row share one pass over the cache. The session and the attention micro-benchmark both use it.
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"
#include "select/attention_policy.h"

namespace fasa {

// Per-thread scratch, reused across calls.
struct GroupAttentionScratch {
  std::vector<AttentionQuery> queries;       // [group]
  std::vector<std::vector<int32_t>> rows;    // [group] each head's selected rows
  std::unique_ptr<bool[]> sparse;            // [group]
  std::vector<float> dense_q, dense_out;     // [<= group, head_dim] the heads that attend to every row
  std::vector<int32_t> fetched;              // offloaded KV head: the union of the group's rows, ascending
  std::vector<int32_t> position;             // offloaded KV head: [n_tokens] a fetched row's place in `fetched`
  GatheredRows gathered;                     // offloaded KV head: those rows, fetched
};

// The step of position `pos` (cache rows 0..pos) for `layer` (the policy's layer; the cache's is
// `cache_layer`). With an offloaded KV head, the selected rows are fetched first.
// q: [group, head_dim] queries of heads kv_head*group.. in the cache's dim order; out: [group, head_dim].
void decode_group_attention(AttentionPolicy& policy, int layer, int kv_head, int64_t pos, const KvCache& cache,
                            int cache_layer, const float* q, int group, float scale, float* out,
                            GroupAttentionScratch& scratch);

}  // namespace fasa
