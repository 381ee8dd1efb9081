#pragma once
// Exact softmax attention of one query head over chosen rows of one KV head: the "gathered
// attention" half of the selection seam. Reads only the rows it is given (gather, don't mask).
#include <cstdint>

#include "ops/kv_view.h"

namespace fasa {

// q . key(row) over both key planes; q is in the cache's dim order.   q: [head_dim]
float key_dot(const float* q, const KvHeadView& kv, int64_t row);

// p[j] = softmax_j(q . K[r_j] / sqrt(head_dim)), r_j = rows[j] (or j when rows is null), j < n_rows:
// the attention probabilities themselves, for policies that accumulate or vote with them.
void attention_weights(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, double* p);

// out[d] = sum_j softmax_j(scale * q . K[r_j]) * V[r_j][d], r_j = rows[j] (or j when rows is null),
// j < n_rows. Single pass with an online softmax. q is in the cache's dim order (see KvCache),
// out in model order (values are not permuted).   q, out: [head_dim]
void gathered_attention(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, float scale,
                        float* out);

// gathered_attention for n_q query heads over the same rows of one KV head (GQA: the heads sharing
// it), reading each key and value row once for all of them.   q, out: [n_q, head_dim]
void grouped_attention(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows,
                       float scale, float* out);

// grouped_attention for a decode step (flash-decoding): inside a parallel region, the rows are cut
// into slices of at least `min_slice` that run as OpenMP tasks, so threads beyond the number of KV
// heads (or done with theirs) share the long rows; the slices' softmax states merge exactly. Outside a
// parallel region, or for short ranges, it is grouped_attention.   q, out: [n_q, head_dim]
constexpr int64_t kMinRowsPerSlice = 4096;  // a task and a merge cost microseconds, 4096 rows far more
void split_grouped_attention(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows,
                             float scale, float* out, int64_t min_slice = kMinRowsPerSlice);

// Asks the memory system for rows r_j, j0 <= j < j1 (key planes and value) ahead of use: the next
// block's reads overlap this block's arithmetic, and gathered rows follow no pattern the hardware
// prefetcher could learn.
void prefetch_rows(const KvHeadView& kv, const int32_t* rows, int64_t j0, int64_t j1);

// Plain two-pass reference with double accumulation, for tests.
void attention_reference(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, float scale,
                         float* out);

}  // namespace fasa
