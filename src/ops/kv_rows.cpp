#include "ops/kv_rows.h"

#if defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define FASA_KV_F16C 1
#endif

#include <type_traits>

#include "fasa/error.h"
#include "ops/hsum_avx.h"

namespace fasa {

namespace {
#if FASA_KV_F16C
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
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
}  // namespace

float kv_dot(const float* q, const void* row, DType t, int n) {
  if (t != DType::F16) return dot_f32(q, static_cast<const float*>(row), n);
  const uint16_t* h = static_cast<const uint16_t*>(row);
  int i = 0;
  float sum = 0.0f;
#if FASA_KV_F16C
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();  // two chains hide the FMA latency
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(h + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load_f16x8(h + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(h + i), a0);
  sum = hsum_avx(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) sum += q[i] * fp16_to_fp32(h[i]);
  return sum;
}

void kv_dot_rows(const float* q, const void* const* rows, int n, DType t, int d, float* score) {
  int i = 0;
#if FASA_KV_F16C
  if (d % 8 == 0)
    for (; i + 8 <= n; i += 8) {
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + c);
        for (int r = 0; r < 8; ++r) {
          const __m256 k = t == DType::F16 ? load_f16x8(static_cast<const uint16_t*>(rows[i + r]) + c)
                                           : _mm256_loadu_ps(static_cast<const float*>(rows[i + r]) + c);
          acc[r] = _mm256_fmadd_ps(qv, k, acc[r]);
        }
      }
      // Pairwise sums: u0 = [rows 0-3 low halves | rows 0-3 high halves], u1 likewise for rows 4-7.
      const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
      const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
      _mm256_storeu_ps(score + i, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
    }
#endif
  for (; i < n; ++i) score[i] = kv_dot(q, rows[i], t, d);
}

void kv_add_scaled(float* out, float w, const void* row, DType t, int n) {
  int i = 0;
  if (t == DType::F16) {
    const uint16_t* h = static_cast<const uint16_t*>(row);
#if FASA_KV_F16C
    const __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load_f16x8(h + i), _mm256_loadu_ps(out + i)));
#endif
    for (; i < n; ++i) out[i] += w * fp16_to_fp32(h[i]);
    return;
  }
  const float* f = static_cast<const float*>(row);
#pragma omp simd
  for (int j = 0; j < n; ++j) out[j] += w * f[j];
}

void kv_store(const float* x, DType t, int n, void* row) {
  if (n == 0) return;  // an empty K_dom plane: row may be null
  if (t != DType::F16) {
    std::memcpy(row, x, (size_t)n * sizeof(float));
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(row);
  for (int i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);  // once per token: no need for speed
}

void kv_load(const void* row, DType t, int n, float* out) {
  if (n > 0) dequantize_row(t, row, out, n);
}

namespace {
// tip_scores' rows [j0, j1) of the range starting at lo, m rows long, one dot at a time.
void tip_rows_plain(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t j0, int64_t j1,
                    int64_t lo, int64_t m, float* score) {
  const size_t row_bytes = (size_t)n_dom * kv_elem_bytes(t);
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

#if FASA_KV_F16C
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
}  // namespace
#endif

#if FASA_KV_F16C
namespace {
// tip_scores' vector path over rows [lo, end of whole blocks of 8); returns where it stopped. ND: the
// K_dom width when known at compile time (the common 8..32: the block's columns stay in registers),
// else 0 and n_dom at run time.
template <int ND>
int64_t tip_blocks(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                   float* score) {
  constexpr int kMaxDom = 128;
  const int nd = ND ? ND : n_dom;
  const int64_t m = hi - lo;
  __m256 cols[ND ? ND : kMaxDom];  // cols[d]: dim d of the block's 8 rows
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8) {
    for (int c = 0; c < nd; c += 8) {
      for (int r = 0; r < 8; ++r) {
        const size_t at = (size_t)(j + r) * nd + c;
        cols[c + r] = t == DType::F16 ? load_f16x8(static_cast<const uint16_t*>(plane) + at)
                                      : _mm256_loadu_ps(static_cast<const float*>(plane) + at);
      }
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
#if FASA_KV_F16C
  if (n_dom % 8 == 0 && n_dom <= 128 && n_q >= kTipTransposedMinQueries) switch (n_dom) {
      case 8: j = tip_blocks<8>(q, n_q, plane, t, n_dom, lo, hi, score); break;
      case 16: j = tip_blocks<16>(q, n_q, plane, t, n_dom, lo, hi, score); break;
      case 24: j = tip_blocks<24>(q, n_q, plane, t, n_dom, lo, hi, score); break;
      case 32: j = tip_blocks<32>(q, n_q, plane, t, n_dom, lo, hi, score); break;
      default: j = tip_blocks<0>(q, n_q, plane, t, n_dom, lo, hi, score);
    }
#endif
  tip_rows_plain(q, n_q, plane, t, n_dom, j, hi, lo, hi - lo, score);  // the rows left over (all, without F16C)
}

void kv_weighted_rows_reference(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d,
                                float* out) {
  for (int h = 0; h < n_q; ++h)
    for (int i = 0; i < n_rows; ++i) kv_add_scaled(out + (size_t)h * d, w[(size_t)h * n_rows + i], rows[i], t, d);
}

#if FASA_KV_F16C
namespace {
// kv_weighted_rows for NQ heads and dims [k0, k0 + 8 * kVecs): NQ * kVecs independent FMA chains.
template <int NQ>
inline void weighted_rows_chunk(const float* w, const void* const* rows, int n_rows, DType t, int d, int k0,
                                float* out) {
  constexpr int kVecs = NQ <= 2 ? 4 : 2;
  __m256 acc[NQ][kVecs];
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_loadu_ps(out + (size_t)h * d + k0 + 8 * v);
  for (int i = 0; i < n_rows; ++i) {
    __m256 x[kVecs];
    for (int v = 0; v < kVecs; ++v)
      x[v] = t == DType::F16 ? load_f16x8(static_cast<const uint16_t*>(rows[i]) + k0 + 8 * v)
                             : _mm256_loadu_ps(static_cast<const float*>(rows[i]) + k0 + 8 * v);
    for (int h = 0; h < NQ; ++h) {
      const __m256 wh = _mm256_broadcast_ss(w + (size_t)h * n_rows + i);
      for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_fmadd_ps(wh, x[v], acc[h][v]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(out + (size_t)h * d + k0 + 8 * v, acc[h][v]);
}

template <int NQ>
void weighted_rows(const float* w, const void* const* rows, int n_rows, DType t, int d, float* out) {
  constexpr int kWidth = NQ <= 2 ? 32 : 16;
  int k0 = 0;
  for (; k0 + kWidth <= d; k0 += kWidth) weighted_rows_chunk<NQ>(w, rows, n_rows, t, d, k0, out);
  for (int h = 0; h < NQ; ++h)  // dims past the last whole chunk
    for (int i = 0; i < n_rows; ++i)
      for (int k = k0; k < d; ++k) out[(size_t)h * d + k] += w[(size_t)h * n_rows + i] * kv_element(rows[i], t, k);
}
}  // namespace
#endif

void kv_weighted_rows(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d, float* out) {
#if FASA_KV_F16C
  in_query_groups(n_q, [&](auto nq, int h) {
    weighted_rows<nq>(w + (size_t)h * n_rows, rows, n_rows, t, d, out + (size_t)h * d);
  });
#else
  kv_weighted_rows_reference(w, n_q, rows, n_rows, t, d, out);
#endif
}

DType kv_type_from_name(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "f32") return DType::F32;
  throw Error("unknown KV cache type '" + name + "' (use f16 or f32)");
}

}  // namespace fasa
