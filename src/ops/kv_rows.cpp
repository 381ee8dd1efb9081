#include "ops/kv_rows.h"

#if defined(__F16C__) && defined(__FMA__) && defined(__AVX2__)
#include <immintrin.h>
#define FASA_KV_SIMD 1
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fasa/error.h"
#include "ops/hsum_avx.h"

namespace fasa {

namespace {

#if FASA_KV_SIMD
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Elements c..c+7 of a row of type T as floats (c a multiple of 8: a Q8_0 block holds all eight).
template <DType T>
inline __m256 load8(const void* row, int c) {
  if constexpr (T == DType::F16) return load_f16x8(static_cast<const uint16_t*>(row) + c);
  if constexpr (T == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(row) + c);
  if constexpr (T == DType::Q8_0) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kv_q8_quant(row, c)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(fp16_at(kv_q8_block(row, c))));
  }
}

// Calls f(std::integral_constant<int, NQ>{}, first) over n queries in groups of NQ = 4 and one last
// group of 1..3: the register-blocked kernels are compiled per group size.
template <class F>
inline void in_query_groups(int n, F&& f) {
  int i = 0;
  for (; i + 4 <= n; i += 4) f(std::integral_constant<int, 4>{}, i);
  if (n - i == 3) f(std::integral_constant<int, 3>{}, i);
  if (n - i == 2) f(std::integral_constant<int, 2>{}, i);
  if (n - i == 1) f(std::integral_constant<int, 1>{}, i);
}
#endif

// sum_i q[i] * row[i] for i in [i0, n), one element at a time.
float dot_tail(const float* q, const void* row, DType t, int i0, int n) {
  float sum = 0.0f;
  for (int i = i0; i < n; ++i) sum += q[i] * kv_row_element(row, t, i);
  return sum;
}
}  // namespace

float kv_dot(const float* q, const void* row, DType t, int n) {
  return with_kv_type(t, [&](auto type) {
    if constexpr (type() == DType::F32) {
      return dot_f32(q, static_cast<const float*>(row), n);  // (dot_f32's order: bit for bit)
    } else {
      int i = 0;
      float sum = 0.0f;
#if FASA_KV_SIMD
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();  // two chains hide the FMA latency
      for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<type()>(row, i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8<type()>(row, i + 8), a1);
      }
      for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8<type()>(row, i), a0);
      sum = hsum_avx(_mm256_add_ps(a0, a1));
#endif
      return sum + dot_tail(q, row, t, i, n);
    }
  });
}

void kv_dot_rows(const float* q, const void* const* rows, int n, DType t, int d, float* score) {
  int i = 0;
#if FASA_KV_SIMD
  if (d % 8 == 0)
    with_kv_type(t, [&](auto type) {
      for (; i + 8 <= n; i += 8) {
        __m256 acc[8];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
          const __m256 qv = _mm256_loadu_ps(q + c);
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load8<type()>(rows[i + r], c), acc[r]);
        }
        // Pairwise sums: u0 = [rows 0-3 low halves | rows 0-3 high halves], u1 likewise for rows 4-7.
        const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
        _mm256_storeu_ps(score + i, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
      }
    });
#endif
  for (; i < n; ++i) score[i] = kv_dot(q, rows[i], t, d);
}

void kv_add_scaled(float* out, float w, const void* row, DType t, int n) {
  int i = 0;
#if FASA_KV_SIMD
  with_kv_type(t, [&](auto type) {
    const __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8<type()>(row, i), _mm256_loadu_ps(out + i)));
  });
#endif
  for (; i < n; ++i) out[i] += w * kv_row_element(row, t, i);
}

namespace {
// Q8_0 blocks of 32 (the last one shorter) with their fp16 scales.
void store_q8_0(const float* x, int n, void* row) {
  uint8_t* block = static_cast<uint8_t*>(row);
  for (int b0 = 0; b0 < n; b0 += kQ8_0Block) {
    const int len = std::min(kQ8_0Block, n - b0);
    float amax = 0.0f;  // NaN once any element is (std::max would skip it): the block then reads back NaN
    for (int i = 0; i < len; ++i)
      if (const float a = std::fabs(x[b0 + i]); std::isnan(a) || a > amax) amax = a;
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = fp32_to_fp16(d);
    std::memcpy(block, &h, 2);
    for (int i = 0; i < len; ++i) reinterpret_cast<int8_t*>(block + 2)[i] = (int8_t)std::lround(x[b0 + i] * id);
    block += 2 + len;
  }
}
}  // namespace

void kv_store(const float* x, DType t, int n, void* row) {
  if (n == 0) return;  // an empty K_dom plane: row may be null
  with_kv_type(t, [&](auto type) {
    if constexpr (type() == DType::F32) {
      std::memcpy(row, x, (size_t)n * sizeof(float));
    } else if constexpr (type() == DType::F16) {
      uint16_t* h = static_cast<uint16_t*>(row);
      for (int i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);  // once per token: no need for speed
    } else {
      store_q8_0(x, n, row);
    }
  });
}

void kv_load(const void* row, DType t, int n, float* out) {
  if (n == 0) return;
  with_kv_type(t, [&](auto type) {
    if constexpr (type() == DType::Q8_0)  // (its last block may be short: element by element)
      for (int i = 0; i < n; ++i) out[i] = kv_row_element(row, t, i);
    else
      dequantize_row(t, row, out, n);
  });
}

void kv_load_rows(const void* plane, DType t, int n, int64_t n_rows, float* out) {
  with_kv_type(t, [&](auto type) {
    if constexpr (type() != DType::Q8_0) {
      kv_load(plane, t, (int)(n * n_rows), out);  // rows back to back: one call
    } else {  // each row's last block may be short
      const size_t row_bytes = kv_row_bytes(t, n);
      for (int64_t r = 0; r < n_rows; ++r)
        kv_load(static_cast<const uint8_t*>(plane) + r * row_bytes, t, n, out + r * n);
    }
  });
}

namespace {
// tip_scores' rows [j0, j1) of the range starting at lo, m rows long, one dot at a time.
void tip_rows_plain(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t j0, int64_t j1,
                    int64_t lo, int64_t m, float* score) {
  const size_t row_bytes = kv_row_bytes(t, n_dom);
  for (int64_t j = j0; j < j1; ++j) {
    const void* row = static_cast<const uint8_t*>(plane) + (size_t)j * row_bytes;
    for (int i = 0; i < n_q; ++i) score[(size_t)i * m + (j - lo)] = kv_dot(q + (size_t)i * n_dom, row, t, n_dom);
  }
}
}  // namespace

void tip_scores_reference(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                          float* score) {
  tip_rows_plain(q, n_q, plane, t, n_dom, lo, hi, lo, hi - lo, score);
}

#if FASA_KV_SIMD
namespace {
// score[i * stride + r] = q_i . row r for NQ queries and the 8 rows whose dims are in cols (transposed).
// Each query keeps several independent FMA chains, so the FMA latency does not serialise the dims.
template <int NQ, int ND>
inline void score_rows8(const float* q, int n_dom, const __m256* cols, float* score, int64_t stride) {
  constexpr int kChains = NQ <= 2 ? 4 : 2;  // n_dom is a multiple of 8, so of kChains
  __m256 acc[NQ][kChains];
  for (auto& a : acc)
    for (auto& c : a) c = _mm256_setzero_ps();
  const int nd = ND ? ND : n_dom;
  for (int d = 0; d < nd; d += kChains)
    for (int c = 0; c < kChains; ++c)
      for (int i = 0; i < NQ; ++i)
        acc[i][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + (size_t)i * n_dom + d + c), cols[d + c], acc[i][c]);
  for (int i = 0; i < NQ; ++i) {
    __m256 sum = acc[i][0];
    for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[i][c]);
    _mm256_storeu_ps(score + (size_t)i * stride, sum);
  }
}

// tip_scores' vector path over rows [lo, end of whole blocks of 8); returns where it stopped. ND: the
// K_dom width when known at compile time (the common 8..32: the block's columns stay in registers),
// else 0 and n_dom at run time.
template <DType T, int ND>
int64_t tip_blocks(const float* q, int n_q, const void* plane, int n_dom, int64_t lo, int64_t hi, float* score) {
  constexpr int kMaxDom = 256;
  const int nd = ND ? ND : n_dom;
  const size_t row_bytes = kv_row_bytes(T, nd);
  const int64_t m = hi - lo;
  __m256 cols[ND ? ND : kMaxDom];  // cols[d]: dim d of the block's 8 rows
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    const uint8_t* block = static_cast<const uint8_t*>(plane) + (size_t)j * row_bytes;
    for (int c = 0; c < nd; c += 8) {
      for (int r = 0; r < 8; ++r) cols[c + r] = load8<T>(block + r * row_bytes, c);
      transpose8(cols + c);
    }
    in_query_groups(n_q, [&](auto nq, int i) {
      score_rows8<nq, ND>(q + (size_t)i * nd, nd, cols, score + (size_t)i * m + (j - lo), m);
    });
  }
  return j;
}
}  // namespace
#endif

void tip_scores(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                float* score) {
  int64_t j = lo;
#if FASA_KV_SIMD
  if (n_dom % 8 == 0 && n_dom <= 256 && n_q >= kTipTransposedMinQueries)
    with_kv_type(t, [&](auto type) {
      constexpr DType T = type();
      switch (n_dom) {
        case 8: j = tip_blocks<T, 8>(q, n_q, plane, n_dom, lo, hi, score); break;
        case 16: j = tip_blocks<T, 16>(q, n_q, plane, n_dom, lo, hi, score); break;
        case 24: j = tip_blocks<T, 24>(q, n_q, plane, n_dom, lo, hi, score); break;
        case 32: j = tip_blocks<T, 32>(q, n_q, plane, n_dom, lo, hi, score); break;
        default: j = tip_blocks<T, 0>(q, n_q, plane, n_dom, lo, hi, score);
      }
    });
#endif
  tip_rows_plain(q, n_q, plane, t, n_dom, j, hi, lo, hi - lo, score);  // the rows left over (all, without SIMD)
}

namespace {
// Int8 ranking takes Q8_0 rows of one block whose width the vector path covers in whole groups of 8
// dims; other widths keep tip_scores (its float dots are as fast as scalar integer ones there).
bool int8_ranking(DType t, int n_dom) { return t == DType::Q8_0 && n_dom > 0 && n_dom <= kQ8_0Block && n_dom % 8 == 0; }

// The n_q queries rounded as kv_store rounds a Q8_0 row: [n_q] rows of kv_row_bytes(Q8_0, n_dom).
void round_queries(const float* q, int n_q, int n_dom, std::vector<uint8_t>& rows) {
  const size_t row_bytes = kv_row_bytes(DType::Q8_0, n_dom);
  rows.resize((size_t)n_q * row_bytes);
  for (int i = 0; i < n_q; ++i) kv_store(q + (size_t)i * n_dom, DType::Q8_0, n_dom, &rows[i * row_bytes]);
}

// One integer dot of a rounded query with a Q8_0 row, scaled (the reference's, and the vector path's tail).
float int8_rank_score(const uint8_t* q_row, const uint8_t* k_row, int n_dom) {
  int32_t sum = 0;
  for (int d = 0; d < n_dom; ++d) sum += (int32_t)(int8_t)q_row[2 + d] * (int8_t)k_row[2 + d];
  return (float)sum * (fp16_at(q_row) * fp16_at(k_row));
}

void int8_rank_rows(const uint8_t* q_rows, int n_q, const void* plane, int n_dom, int64_t j0, int64_t j1, int64_t lo,
                    int64_t m, float* score) {
  const size_t row_bytes = kv_row_bytes(DType::Q8_0, n_dom);
  for (int64_t j = j0; j < j1; ++j)
    for (int i = 0; i < n_q; ++i)
      score[(size_t)i * m + (j - lo)] =
          int8_rank_score(q_rows + i * row_bytes, static_cast<const uint8_t*>(plane) + (size_t)j * row_bytes, n_dom);
}

#if FASA_KV_SIMD
// tip_rank_scores' vector path over rows [lo, end of whole blocks of 8); returns where it stopped.
// The quants of 8 rows are transposed into ND / 4 registers whose lane r holds 4 dims of row r, so each
// query costs one 4-wide integer dot per 4 dims for all 8 rows. ND: 8, 16, 24 or 32.
template <int ND>
int64_t int8_rank_blocks(const uint8_t* q_rows, int n_q, const void* plane, int64_t lo, int64_t hi, float* score) {
  constexpr int kGroups = ND / 4;
  const size_t row_bytes = kv_row_bytes(DType::Q8_0, ND);  // the queries' rows too
  const int64_t m = hi - lo;
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    const uint8_t* block = static_cast<const uint8_t*>(plane) + (size_t)j * row_bytes;
    __m256i dims[(ND + 15) / 16 * 4];  // dims[g] lane r: quants 4g..4g+3 of row r (g < kGroups)
    for (int c = 0; c < ND; c += 16) {
      auto quants = [&](int r) {  // row r's 16 quants from dim c, or its last 8 (no read past the row)
        const auto* p = reinterpret_cast<const __m128i*>(block + r * row_bytes + 2 + c);
        return ND - c >= 16 ? _mm_loadu_si128(p) : _mm_loadl_epi64(p);
      };
      __m256i y[4];  // y[r]: the quants of row r in the low lane, of row r + 4 in the high lane
      for (int r = 0; r < 4; ++r) y[r] = _mm256_set_m128i(quants(r + 4), quants(r));
      const __m256i t01l = _mm256_unpacklo_epi32(y[0], y[1]), t01h = _mm256_unpackhi_epi32(y[0], y[1]);
      const __m256i t23l = _mm256_unpacklo_epi32(y[2], y[3]), t23h = _mm256_unpackhi_epi32(y[2], y[3]);
      const int g = c / 4;
      dims[g] = _mm256_unpacklo_epi64(t01l, t23l);
      dims[g + 1] = _mm256_unpackhi_epi64(t01l, t23l);
      if (ND - c >= 16) {
        dims[g + 2] = _mm256_unpacklo_epi64(t01h, t23h);
        dims[g + 3] = _mm256_unpackhi_epi64(t01h, t23h);
      }
    }
    alignas(16) uint16_t scales[8];
    for (int r = 0; r < 8; ++r) std::memcpy(&scales[r], block + r * row_bytes, 2);
    const __m256 k_scale = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(scales)));
    __m256i magnitude[kGroups];
    for (int g = 0; g < kGroups; ++g) magnitude[g] = _mm256_abs_epi8(dims[g]);
    for (int i = 0; i < n_q; ++i) {
      const uint8_t* qr = q_rows + i * row_bytes;
      __m256i acc = _mm256_setzero_si256();
      for (int g = 0; g < kGroups; ++g) {
        int32_t four;
        std::memcpy(&four, qr + 2 + 4 * g, 4);
        acc = add_products4(acc, magnitude[g], _mm256_sign_epi8(_mm256_set1_epi32(four), dims[g]));  // q * sign(k)
      }
      const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(fp16_at(qr)), k_scale);
      _mm256_storeu_ps(score + (size_t)i * m + (j - lo), _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale));
    }
  }
  return j;
}
#endif
}  // namespace

void tip_rank_scores_reference(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo,
                               int64_t hi, float* score) {
  if (!int8_ranking(t, n_dom)) return tip_scores_reference(q, n_q, plane, t, n_dom, lo, hi, score);
  std::vector<uint8_t> q_rows;
  round_queries(q, n_q, n_dom, q_rows);
  int8_rank_rows(q_rows.data(), n_q, plane, n_dom, lo, hi, lo, hi - lo, score);
}

void tip_rank_scores(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                     float* score) {
  if (!int8_ranking(t, n_dom)) return tip_scores(q, n_q, plane, t, n_dom, lo, hi, score);
  thread_local std::vector<uint8_t> q_rows;  // [n_q] Q8_0 rows
  round_queries(q, n_q, n_dom, q_rows);
  int64_t j = lo;
#if FASA_KV_SIMD
  switch (n_dom) {
    case 8: j = int8_rank_blocks<8>(q_rows.data(), n_q, plane, lo, hi, score); break;
    case 16: j = int8_rank_blocks<16>(q_rows.data(), n_q, plane, lo, hi, score); break;
    case 24: j = int8_rank_blocks<24>(q_rows.data(), n_q, plane, lo, hi, score); break;
    case 32: j = int8_rank_blocks<32>(q_rows.data(), n_q, plane, lo, hi, score); break;
  }
#endif
  int8_rank_rows(q_rows.data(), n_q, plane, n_dom, j, hi, lo, hi - lo, score);
}

void kv_weighted_rows_reference(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d,
                                float* out) {
  for (int h = 0; h < n_q; ++h)
    for (int i = 0; i < n_rows; ++i) kv_add_scaled(out + (size_t)h * d, w[(size_t)h * n_rows + i], rows[i], t, d);
}

#if FASA_KV_SIMD
namespace {
// kv_weighted_rows for NQ heads and dims [k0, k0 + 8 * kVecs): NQ * kVecs independent FMA chains.
template <DType T, int NQ>
inline void weighted_rows_chunk(const float* w, const void* const* rows, int n_rows, int d, int k0, float* out) {
  constexpr int kVecs = NQ <= 2 ? 4 : 2;
  __m256 acc[NQ][kVecs];
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_loadu_ps(out + (size_t)h * d + k0 + 8 * v);
  for (int i = 0; i < n_rows; ++i) {
    __m256 x[kVecs];
    for (int v = 0; v < kVecs; ++v) x[v] = load8<T>(rows[i], k0 + 8 * v);
    for (int h = 0; h < NQ; ++h) {
      const __m256 wh = _mm256_broadcast_ss(w + (size_t)h * n_rows + i);
      for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_fmadd_ps(wh, x[v], acc[h][v]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(out + (size_t)h * d + k0 + 8 * v, acc[h][v]);
}

template <DType T, int NQ>
void weighted_rows(const float* w, const void* const* rows, int n_rows, int d, float* out) {
  constexpr int kWidth = NQ <= 2 ? 32 : 16;
  int k0 = 0;
  for (; k0 + kWidth <= d; k0 += kWidth) weighted_rows_chunk<T, NQ>(w, rows, n_rows, d, k0, out);
  for (int h = 0; h < NQ; ++h)  // dims past the last whole chunk
    for (int i = 0; i < n_rows; ++i)
      for (int k = k0; k < d; ++k) out[(size_t)h * d + k] += w[(size_t)h * n_rows + i] * kv_row_element(rows[i], T, k);
}
}  // namespace
#endif

void kv_weighted_rows(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d, float* out) {
#if FASA_KV_SIMD
  with_kv_type(t, [&](auto type) {
    in_query_groups(n_q, [&](auto nq, int h) {
      weighted_rows<type(), nq>(w + (size_t)h * n_rows, rows, n_rows, d, out + (size_t)h * d);
    });
  });
#else
  kv_weighted_rows_reference(w, n_q, rows, n_rows, t, d, out);
#endif
}


}  // namespace fasa
