#pragma once
// Dense causal attention of a block of consecutive prompt positions (prefill), flash-attention style:
// the KV rows are read and converted to float once per block of positions for all of its queries,
// instead of once per position.
#include <cstdint>

#include "ops/kv_view.h"

namespace fasa {

// Queries (positions x query heads) per call that make good use of the kernel: two AVX-512 vectors.
constexpr int kCausalBlockQueries = 32;

// Prefill positions that see fewer rows than this attend one at a time with the decode step's kernel
// (grouped_attention): there attention is a small part of a position's cost, and short prompts are
// computed exactly as a decode step computes a position's attention. (At 1024, one-at-a-time attention
// was a fifth of a small model's pp512: kjv-tiny 11.2k -> 12.8k t/s with 128.)
constexpr int64_t kBlockedPrefillRows = 128;

// For positions i < n_pos and query heads h < n_qh: out[i][h] = softmax_j(scale * q[i][h] . K[j]) V[j]
// over rows j < first_len + i (position i sees one row more than position i - 1), and with a sliding
// `window` > 0 only over its last `window` of them (j >= first_len + i - window). q is in the cache's
// dim order, out in model order (values are not permuted).
//   q: [n_pos, n_qh, head_dim]; out: n_pos rows of out_stride floats, head h at h * head_dim.
void causal_block_attention(const float* q, int n_pos, int n_qh, const KvHeadView& kv, int64_t first_len, float scale,
                            float* out, int64_t out_stride, int64_t window = 0);

}  // namespace fasa
