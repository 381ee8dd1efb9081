#include "ops/causal_attention.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "fasa/error.h"
#include "ops/elementwise.h"
#include "ops/float_vec.h"
#include "ops/kv_rows.h"
#include "ops/kv_traffic.h"

namespace fasa {

namespace {

constexpr int kBlock = 64;  // rows converted to float and scored together

// s[(r0 + i) * nqp + v0 .. + NV * kVecF] = R rows of kb times NV vectors of queries (qt holds them by dim).
//   qt: [d, nqp]; kb: [rows, d]; s: [rows, nqp]
template <int R, int NV>
inline void score_tile(const float* qt, int nqp, int v0, const float* kb, int r0, int d, float* s) {
  VecF acc[R][NV] = {};
  for (int k = 0; k < d; ++k) {
    VecF q[NV];
    for (int v = 0; v < NV; ++v) q[v] = load_vec(qt + (size_t)k * nqp + v0 + v * kVecF);
    for (int i = 0; i < R; ++i) {
      const float x = kb[(size_t)(r0 + i) * d + k];
      for (int v = 0; v < NV; ++v) acc[i][v] += x * q[v];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) store_vec(s + (size_t)(r0 + i) * nqp + v0 + v * kVecF, acc[i][v]);
}

template <int NV>
void score_rows(const float* qt, int nqp, int v0, const float* kb, int b, int d, float* s) {
  constexpr int kRows = kVecF == 16 ? 8 : 4;  // accumulators that fit the registers (32 with AVX-512, else 16)
  int r = 0;
  for (; r + kRows <= b; r += kRows) score_tile<kRows, NV>(qt, nqp, v0, kb, r, d, s);
  for (; r < b; ++r) score_tile<1, NV>(qt, nqp, v0, kb, r, d, s);
}

// s[r][i] = scaled q_i . key row r for the block's b rows, every query (two query vectors at a time).
void block_scores(const float* qt, int nqp, const float* kb, int b, int d, float* s) {
  int v0 = 0;
  for (; v0 + 2 * kVecF <= nqp; v0 += 2 * kVecF) score_rows<2>(qt, nqp, v0, kb, b, d, s);
  if (v0 < nqp) score_rows<1>(qt, nqp, v0, kb, b, d, s);
}

// o[i0 + h][k0 ..] += sum_r p[r][i0 + h] * vb[r][k0 ..] for NQ queries and NV vectors of dims.
//   p: [rows, nqp]; vb: [rows, d]; o: [n_q, d]
template <int NQ, int NV>
inline void weighted_tile(const float* p, int nqp, int i0, const float* vb, int b, int d, int k0, float* o) {
  VecF acc[NQ][NV];
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < NV; ++v) acc[h][v] = load_vec(o + (size_t)(i0 + h) * d + k0 + v * kVecF);
  for (int r = 0; r < b; ++r) {
    VecF x[NV];
    for (int v = 0; v < NV; ++v) x[v] = load_vec(vb + (size_t)r * d + k0 + v * kVecF);
    for (int h = 0; h < NQ; ++h) {
      const float w = p[(size_t)r * nqp + i0 + h];
      for (int v = 0; v < NV; ++v) acc[h][v] += w * x[v];
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < NV; ++v) store_vec(o + (size_t)(i0 + h) * d + k0 + v * kVecF, acc[h][v]);
}

template <int NQ>
void weighted_queries(const float* p, int nqp, int i0, const float* vb, int b, int d, float* o) {
  constexpr int kVecs = kVecF == 16 ? 4 : 2;  // NQ * kVecs accumulators in registers
  int k0 = 0;
  for (; k0 + kVecs * kVecF <= d; k0 += kVecs * kVecF) weighted_tile<NQ, kVecs>(p, nqp, i0, vb, b, d, k0, o);
  for (; k0 + kVecF <= d; k0 += kVecF) weighted_tile<NQ, 1>(p, nqp, i0, vb, b, d, k0, o);
  for (int h = i0; h < i0 + NQ; ++h)  // dims past the last whole vector
    for (int r = 0; r < b; ++r)
      for (int k = k0; k < d; ++k) o[(size_t)h * d + k] += p[(size_t)r * nqp + h] * vb[(size_t)r * d + k];
}

// o[i] += p[:, i] . value rows, for the n_q real queries (four at a time).
void block_values(const float* p, int nqp, int n_q, const float* vb, int b, int d, float* o) {
  int i = 0;
  for (; i + 4 <= n_q; i += 4) weighted_queries<4>(p, nqp, i, vb, b, d, o);
  for (; i < n_q; ++i) weighted_queries<1>(p, nqp, i, vb, b, d, o);
}
}  // namespace

void causal_block_attention(const float* q, int n_pos, int n_qh, const KvHeadView& kv, int64_t first_len, float scale,
                            float* out, int64_t out_stride, int64_t window) {
  const int d = kv.head_dim, nd = kv.n_dom, n_q = n_pos * n_qh;
  if (n_q < 1 || first_len < 1 || first_len + n_pos - 1 > kv.n_tokens)
    throw Error("causal_block_attention: bad block (" + std::to_string(n_pos) + " positions x " +
                std::to_string(n_qh) + " heads from " + std::to_string(first_len) + " rows)");
  const int nqp = (n_q + kVecF - 1) / kVecF * kVecF;  // queries padded to whole vectors (the padding scores 0)
  const int64_t n_rows = first_len + n_pos - 1;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();

  thread_local std::vector<float> qt, s, kb, vb, o, mx, den, block_max;
  qt.assign((size_t)d * nqp, 0.0f);                        // [d, nqp] scaled queries by dim
  s.resize((size_t)kBlock * nqp);                          // [kBlock, nqp] scores, then weights
  kb.resize((size_t)kBlock * d), vb.resize(kb.size());     // [kBlock, d] the block's key and value rows
  o.assign((size_t)n_q * d, 0.0f);                         // [n_q, d] unnormalised outputs
  mx.assign(nqp, kMasked), den.assign(nqp, 0.0f);          // [nqp] online-softmax state
  block_max.resize(nqp);                                   // [nqp]
  for (int i = 0; i < n_q; ++i)
    for (int k = 0; k < d; ++k) qt[(size_t)k * nqp + i] = scale * q[(size_t)i * d + k];

  const int64_t first_row = window > 0 ? std::max<int64_t>(0, first_len - window) : 0;  // the first position's
  for (int64_t j0 = first_row; j0 < n_rows; j0 += kBlock) {
    const int b = (int)std::min<int64_t>(kBlock, n_rows - j0);
    kv_load_rows(kv.v_row(j0), kv.v_type, d, b, vb.data());  // a plane's rows lie one after another
    if (nd == 0) {
      kv_load_rows(kv.k_rest_row(j0), kv.k_type, d, b, kb.data());
    } else {
      for (int r = 0; r < b; ++r) {  // key rows joined from their two planes
        kv_load(kv.k_dom_row(j0 + r), kv.k_type, nd, &kb[(size_t)r * d]);
        kv_load(kv.k_rest_row(j0 + r), kv.k_type, d - nd, &kb[(size_t)r * d + nd]);
      }
    }
    block_scores(qt.data(), nqp, kb.data(), b, d, s.data());
    for (int64_t j = std::max(j0, first_len); j < j0 + b; ++j) {  // rows the first positions must not see
      const int64_t blind = std::min<int64_t>(n_q, (j - first_len + 1) * n_qh);  // queries of positions <= j - first_len
      for (int i = 0; i < blind; ++i) s[(size_t)(j - j0) * nqp + i] = kMasked;
    }
    if (window > 0)  // rows that later positions' windows have passed: row j leaves at position j - first_len + window + 1
      for (int64_t j = j0; j < j0 + b && j < first_len + n_pos - 1 - window; ++j)
        for (int i = (int)(j - first_len + window + 1) * n_qh; i < n_q; ++i) s[(size_t)(j - j0) * nqp + i] = kMasked;

    // Online softmax: each query's new maximum rescales what it has so far; masked rows weigh 0.
    std::copy(mx.begin(), mx.end(), block_max.begin());
    for (int r = 0; r < b; ++r) {
      const float* sr = &s[(size_t)r * nqp];
#pragma omp simd
      for (int i = 0; i < nqp; ++i) block_max[i] = std::max(block_max[i], sr[i]);
    }
    for (int i = 0; i < n_q; ++i) {
      if (block_max[i] == mx[i]) continue;
      const float c = exp_fast(mx[i] - block_max[i]);  // mx = -inf at first: 0 * tiny
      den[i] *= c;
      for (int k = 0; k < d; ++k) o[(size_t)i * d + k] *= c;
    }
    std::copy(block_max.begin(), block_max.end(), mx.begin());
    for (int r = 0; r < b; ++r) {
      float* sr = &s[(size_t)r * nqp];
#pragma omp simd
      for (int i = 0; i < nqp; ++i) {
        sr[i] = sr[i] == kMasked ? 0.0f : exp_fast(sr[i] - mx[i]);
        den[i] += sr[i];
      }
    }
    block_values(s.data(), nqp, n_q, vb.data(), b, d, o.data());
  }
  count_kv_bytes_read(kv, (uint64_t)(n_rows - first_row) * (kv.key_row_bytes() + kv.value_row_bytes()));  // each row once

  for (int i = 0; i < n_q; ++i) {
    const float inv = 1.0f / den[i];  // every query sees its own row: den >= 1
    float* to = out + (size_t)(i / n_qh) * out_stride + (size_t)(i % n_qh) * d;
    for (int k = 0; k < d; ++k) to[k] = o[(size_t)i * d + k] * inv;
  }
}

}  // namespace fasa
