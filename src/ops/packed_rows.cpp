#include "ops/packed_rows.h"

#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "fasa/error.h"
#include "ops/dtype_kernels.h"
#include "ops/hsum_avx.h"
#include "ops/packed_layout.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define FASA_PACKED_K4 1
#endif

namespace fasa {

namespace {

// ---- Q8_0 ----

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define FASA_PACKED_Q8 1
#endif

void pack_q8_0(const void* const* rows, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, out += kPackedQ8Bytes) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* block = static_cast<const uint8_t*>(rows[r]) + b * 34;
      std::memcpy(out + 2 * r, block, 2);
      for (int c = 0; c < 8; ++c)
        for (int e = 0; e < 4; ++e) out[16 + c * 32 + r * 4 + e] = (uint8_t)((int8_t)block[2 + 4 * c + e] + 128);
    }
  }
}

#if FASA_PACKED_Q8
constexpr size_t kPackedAhead = 4;  // blocks: how far ahead of use the packed rows are asked for

// The packed rows of NG groups at once: NG streams through memory per thread (one stream alone does
// not keep enough reads in flight).   out: [NG * 8]
template <int NG>
void dot_packed_groups(const uint8_t* const* groups, const QuantizedActs& x, int64_t n, float* out) {
  __m256 acc[NG][8];  // acc[g][c]: lane r = row r's running sum of its chunk-c sums (a lane of dot_blocks' acc)
  for (auto& a : acc)
    for (auto& c : a) c = _mm256_setzero_ps();
  const int8_t* xq = x.q.data();
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256 xd = _mm256_set1_ps(x.d[b]);
    for (int g = 0; g < NG; ++g) {
      const uint8_t* p = groups[g] + b * kPackedQ8Bytes;
      prefetch_lines(p + kPackedAhead * kPackedQ8Bytes, kPackedQ8Bytes);
      const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), xd);
      for (int c = 0; c < 8; ++c) {
        int32_t xc;
        std::memcpy(&xc, xq + b * 32 + 4 * c, 4);
        // (w + 128) . x - 128 * sum(x) = w . x, for the 8 rows at once
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_set1_epi32(x.minus128_sum4[b * 8 + c]),
                                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * c)),
                                                 _mm256_set1_epi32(xc));
        acc[g][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[g][c]);
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    transpose8(acc[g]);  // acc[g][r]: row r's eight lanes
    for (int r = 0; r < 8; ++r) out[g * 8 + r] = hsum_avx(acc[g][r]);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define FASA_PACKED_PAIRS 1
// GCC 12's own AVX-512 headers trip -W(maybe-)uninitialized (the unmasked forms' undefined source).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// Two tokens per 512-bit vector: a chunk's 32 packed bytes go to both halves and each half takes one
// token's activations, so one vpdpbusd gives the chunk's sums for 8 rows x 2 tokens. NP pairs share
// each load. Lane by lane these are dot_packed_groups' steps (bit-identical per token).
//   x: [2 * NP]; out[t * ldo + r] for t < 2 * NP, r < 8
template <int NP>
void dot_packed_pairs(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  constexpr __mmask16 kHigh = 0xFF00;  // the second token's lanes
  __m512 acc[NP][8];
  for (auto& a : acc)
    for (auto& c : a) c = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = group + b * kPackedQ8Bytes;
    prefetch_lines(p + kPackedAhead * kPackedQ8Bytes, kPackedQ8Bytes);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512 dw2 = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(dw)));
    __m512 d[NP];
    for (int k = 0; k < NP; ++k)
      d[k] = _mm512_mul_ps(dw2, _mm512_mask_broadcastss_ps(_mm512_set1_ps(x[2 * k].d[b]), kHigh,
                                                            _mm_set_ss(x[2 * k + 1].d[b])));
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * c)));
      for (int k = 0; k < NP; ++k) {
        const QuantizedActs &x0 = x[2 * k], &x1 = x[2 * k + 1];
        int32_t c0, c1;
        std::memcpy(&c0, x0.q.data() + b * 32 + 4 * c, 4);
        std::memcpy(&c1, x1.q.data() + b * 32 + 4 * c, 4);
        const __m512i init = _mm512_mask_set1_epi32(_mm512_set1_epi32(x0.minus128_sum4[b * 8 + c]), kHigh,
                                                    x1.minus128_sum4[b * 8 + c]);
        const __m512i sums = _mm512_dpbusd_epi32(init, w, _mm512_mask_set1_epi32(_mm512_set1_epi32(c0), kHigh, c1));
        acc[k][c] = _mm512_fmadd_ps(d[k], _mm512_cvtepi32_ps(sums), acc[k][c]);
      }
    }
  }
  for (int k = 0; k < NP; ++k) {
    __m256 lo[8], hi[8];  // the two tokens' halves
    for (int c = 0; c < 8; ++c) {
      lo[c] = _mm512_castps512_ps256(acc[k][c]);
      hi[c] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[k][c]), 1));
    }
    transpose8(lo);
    transpose8(hi);
    for (int r = 0; r < 8; ++r) {
      out[2 * k * ldo + r] = hsum_avx(lo[r]);
      out[(2 * k + 1) * ldo + r] = hsum_avx(hi[r]);
    }
  }
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
#endif

#if FASA_PACKED_Q8
void dot_packed_rows_q8(const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs& x, int64_t n, float* out) {
  const uint8_t* groups[2] = {group_a, group_b};
  if (group_b)
    dot_packed_groups<2>(groups, x, n, out);
  else
    dot_packed_groups<1>(groups, x, n, out);
}

void dot_packed_tokens_q8(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out, int64_t ldo) {
#if FASA_PACKED_PAIRS
  constexpr int kPairs = 2;  // per pass: 16 accumulators per pair fill the registers
  int t = 0;
  for (; t + 2 * kPairs <= n_tokens; t += 2 * kPairs) dot_packed_pairs<kPairs>(group, x + t, n, out + t * ldo, ldo);
  for (; t + 2 <= n_tokens; t += 2) dot_packed_pairs<1>(group, x + t, n, out + t * ldo, ldo);
  if (t < n_tokens) dot_packed_rows_q8(group, nullptr, x[t], n, out + t * ldo);
#else
  for (int t = 0; t < n_tokens; ++t) dot_packed_rows_q8(group, nullptr, x[t], n, out + t * ldo);
#endif
}
#endif

// ---- Q4_K ----

// One row's 8 bytes of a packed line: columns k and 8 + k of 16 whose quants are the low (or, where
// high, the high) nibbles of src[k] and src[8 + k], as byte k's low and high nibbles.
inline void put_line(const uint8_t* src, bool high, uint8_t* out) {
  uint64_t a, b;
  std::memcpy(&a, src, 8);
  std::memcpy(&b, src + 8, 8);
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL;
  const uint64_t v = high ? ((a >> 4) & kLow) | (b & ~kLow) : (a & kLow) | ((b & kLow) << 4);
  std::memcpy(out, &v, 8);
}

void pack_q4_k(const void* const* rows, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b, out += kPackedK4Bytes) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* p = static_cast<const uint8_t*>(rows[r]) + b * 144;
      std::memcpy(out + 2 * r, p, 2);
      std::memcpy(out + 16 + 2 * r, p + 2, 2);
      const uint8_t* sc = p + 4;
      for (int s = 0; s < 8; ++s) {  // the 6-bit scales and mins as unpack_k4 decodes them
        out[32 + 8 * s + r] = (uint8_t)(s < 4 ? sc[s] & 63 : (sc[s + 4] & 0x0F) | ((sc[s - 4] >> 6) << 4));
        out[96 + 32 * (s / 4) + 4 * r + s % 4] = (uint8_t)(s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
      }
      // element e of the super-block: byte 32 * (e / 64) + e % 32 of qs, high nibble where e % 64 >= 32
      for (int m = 0; m < 16; ++m) put_line(p + 16 + 32 * (m / 4) + 16 * (m % 2), m % 4 >= 2, out + 160 + 64 * m + 8 * r);
    }
  }
}

// ---- Q4_0 ----

void pack_q4_0(const void* const* rows, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, out += kPackedQ4Bytes) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* p = static_cast<const uint8_t*>(rows[r]) + b * 18;
      std::memcpy(out + 2 * r, p, 2);
      // element e: byte e % 16, high nibble where e >= 16; line m: columns 16m..16m+15, as Q4_K's lines
      for (int m = 0; m < 2; ++m) put_line(p + 2, m == 1, out + 16 + 64 * m + 8 * r);
    }
  }
}

// ---- Q6_K ----

void pack_q6_k(const void* const* rows, int64_t n, uint8_t* out) {
  UnpackedRow w[8];  // each row's quants less 32, in element order (quant_dot's unpacking)
  for (int r = 0; r < 8; ++r) unpack_row(DType::Q6_K, rows[r], n, w[r]);
  for (int64_t b = 0; b < n / 256; ++b, out += kPackedQ6Bytes) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* p = static_cast<const uint8_t*>(rows[r]) + b * 210;
      std::memcpy(out + 2 * r, p + 208, 2);
      for (int s = 0; s < 16; ++s) out[16 + 8 * s + r] = p[192 + s];
      auto quant = [&](int e) { return w[r].q[b * 256 + e] + 32; };  // element e, 0-63
      for (int m = 0; m < 16; ++m)  // Q4_K's lines of low nibbles
        for (int k = 0; k < 8; ++k)
          out[144 + 64 * m + 8 * r + k] = (uint8_t)((quant(16 * m + k) & 0x0F) | (quant(16 * m + 8 + k) & 0x0F) << 4);
      for (int j = 0; j < 8; ++j)  // high bits of lines 2j, 2j + 1: byte 8r + k, two bits per column
        for (int k = 0; k < 8; ++k) {
          uint8_t h = 0;
          for (int c = 0; c < 4; ++c) h |= (uint8_t)((quant(32 * j + 8 * c + k) >> 4) << (2 * c));
          out[1168 + 64 * j + 8 * r + k] = h;
        }
    }
  }
}

#if FASA_PACKED_K4
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// Super-blocks: how far ahead of use the packed K-quant rows are asked for, an eighth of a super-block
// with each eighth computed. A whole super-block's lines asked for at once (27 for Q6_K) overran the
// core's outstanding misses and stalled it: one-token Q6_K over 151 MB (2 threads, Zen 4) ran at 24-29
// GB/s so and 34-39 spread (the unpacked row kernel 27-31); Q4_K at 34-37 and 38-39.
constexpr int kKquantAhead = 4;
constexpr int kQ4Ahead = 16;  // Q4_0 blocks: the same

// 8 bytes of p in every 64-bit lane.
inline __m512i broadcast8(const void* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// acc plus, in lanes 2r, 2r + 1, row r's products over the two 8-column runs wa and wb meet (xq: their 16
// activations).
inline __m512i two_dots(__m512i acc, __m512i wa, __m512i wb, const int8_t* xq) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, wa, broadcast8(xq)), wb, broadcast8(xq + 8));
}

// Lane pairs 2r, 2r + 1 summed: row r's int32 in lane r.
inline __m256i pair_sums(__m512i v) { return _mm512_cvtepi64_epi32(_mm512_add_epi64(v, _mm512_srli_epi64(v, 32))); }

// NT tokens against one packed group: per super-block the exact isum and msum of dot_k4_row for all 8
// rows at once, then its float steps in 8 lanes.   x: [NT]; out[t * ldo + r]
template <int NT>
void dot_packed_k4(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = group + b * kPackedK4Bytes;
    const uint8_t* qs = p + 160;
    __m512i isum[NT];  // lanes 2r, 2r + 1: row r's scaled sums of its two 4-column chunks of each line
    for (auto& v : isum) v = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      prefetch_lines(p + kKquantAhead * kPackedK4Bytes + 160 * s, 160);  // 8 x 160 bytes cover the 1184
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 32 + 8 * s));
      const __m512i scale = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc8, sc8));  // lanes 2r, 2r + 1: row r's
      const __m512i raw0 = _mm512_loadu_si512(qs + 128 * s), raw1 = _mm512_loadu_si512(qs + 128 * s + 64);
      const __m512i w0 = _mm512_and_si512(raw0, low4), w1 = _mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4);
      const __m512i w2 = _mm512_and_si512(raw1, low4), w3 = _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4);
      for (int t = 0; t < NT; ++t) {  // two chains of two dots: one of four made one token latency-bound
        const int8_t* xq = x[t].q.data() + b * 256 + 32 * s;
        const __m512i zero = _mm512_setzero_si512();
        const __m512i dp = _mm512_add_epi32(two_dots(zero, w0, w1, xq), two_dots(zero, w2, w3, xq + 16));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dp, scale));
      }
    }
    // mins as int16: lanes 2r, 2r + 1 of mins_a hold row r's mins of sub-blocks 0-1, 2-3; mins_b 4-5, 6-7
    const __m512i mins_a = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 96)));
    const __m512i mins_b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128)));
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    for (int t = 0; t < NT; ++t) {
      const int16_t* xs = x[t].sum32.data() + b * 8;
      const __m512i msum = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), mins_a, broadcast8(xs)),
                                               mins_b, broadcast8(xs + 4));
      const __m256 xd = _mm256_set1_ps(x[t].d[b]);
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(pair_sums(isum[t])), sum[t]);
      const __m256 neg_dmin = _mm256_xor_ps(_mm256_mul_ps(dmin, xd), _mm256_set1_ps(-0.0f));
      sum[t] = _mm256_fmadd_ps(neg_dmin, _mm256_cvtepi32_ps(pair_sums(msum)), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}

// ---- Q4_0 ----

// NT tokens against one packed Q4_0 group: per block each row's exact integer sum (lanes 2r, 2r + 1
// as in dot_packed_k4, less 8 times the activations' sum), then dot_direct_rows' one float step per
// block, for 8 rows in 8 lanes.   x: [NT]; out[t * ldo + r]
template <int NT>
void dot_packed_q4_0(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = group + b * kPackedQ4Bytes;
    prefetch_lines(p + kQ4Ahead * kPackedQ4Bytes, kPackedQ4Bytes);
    const __m512i raw0 = _mm512_loadu_si512(p + 16), raw1 = _mm512_loadu_si512(p + 80);
    const __m512i w0 = _mm512_and_si512(raw0, low4), w1 = _mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4);
    const __m512i w2 = _mm512_and_si512(raw1, low4), w3 = _mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 32;
      const __m512i zero = _mm512_setzero_si512();
      const __m512i dp = _mm512_add_epi32(two_dots(zero, w0, w1, xq), two_dots(zero, w2, w3, xq + 16));
      const __m256i isum = _mm256_add_epi32(pair_sums(dp), _mm256_set1_epi32(-8 * (int32_t)x[t].sum32[b]));
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t].d[b])), _mm256_cvtepi32_ps(isum), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}


// ---- Q6_K ----

// NT tokens against one packed Q6_K group: per super-block dot_q6_k_row's exact integer sum for all 8
// rows (each line is one sub-block of 16 columns, started from -16 * 32 * its activations' sum in both
// of a row's lanes, the quants' +32), then its one float step, for 8 rows in 8 lanes.   x: [NT]; out[t * ldo + r]
template <int NT>
void dot_packed_q6_k(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = group + b * kPackedQ6Bytes;
    __m512i isum[NT];  // lanes 2r, 2r + 1: row r's scaled sums
    for (auto& v : isum) v = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {  // lines 2j and 2j + 1: sub-blocks 2j, 2j + 1
      prefetch_lines(p + kKquantAhead * kPackedQ6Bytes + 224 * j, 224);  // 8 x 224 bytes cover the 1680
      const __m512i raw0 = _mm512_loadu_si512(p + 144 + 128 * j), raw1 = _mm512_loadu_si512(p + 208 + 128 * j);
      const __m512i hb = _mm512_loadu_si512(p + 1168 + 64 * j);
      const __m512i w0 = _mm512_or_si512(_mm512_and_si512(raw0, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits45));
      const __m512i w1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw0, 4), low4),
                                         _mm512_and_si512(_mm512_slli_epi16(hb, 2), bits45));
      const __m512i w2 = _mm512_or_si512(_mm512_and_si512(raw1, low4), _mm512_and_si512(hb, bits45));
      const __m512i w3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw1, 4), low4),
                                         _mm512_and_si512(_mm512_srli_epi16(hb, 2), bits45));
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 + 16 * j));  // [2][8 rows]
      const __m512i scale0 = _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(sc8, sc8));  // lanes 2r, 2r + 1: row r's
      const __m512i scale1 = _mm512_cvtepi8_epi32(_mm_unpackhi_epi8(sc8, sc8));
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = x[t].q.data() + b * 256 + 32 * j;
        const int32_t* s16 = x[t].sum16.data() + b * 16 + 2 * j;
        const __m512i dp0 = two_dots(_mm512_set1_epi32(-16 * s16[0]), w0, w1, xq);
        const __m512i dp1 = two_dots(_mm512_set1_epi32(-16 * s16[1]), w2, w3, xq + 16);
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(dp0, scale0), _mm512_mullo_epi32(dp1, scale1)));
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    for (int t = 0; t < NT; ++t)
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t].d[b])), _mm256_cvtepi32_ps(pair_sums(isum[t])), sum[t]);
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#if FASA_PACKED_K4
// One group of the 4-bit lines' layouts (Q4_K, Q6_K, Q4_0) against n_tokens tokens, 8 a pass.
template <DType T>
void dot_packed_nibbles(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                        int64_t ldo) {
  in_token_passes<8>(n_tokens, [&]<int NT>(int k) {
    if constexpr (T == DType::Q4_K) dot_packed_k4<NT>(group, x + k, n, out + k * ldo, ldo);
    else if constexpr (T == DType::Q6_K) dot_packed_q6_k<NT>(group, x + k, n, out + k * ldo, ldo);
    else dot_packed_q4_0<NT>(group, x + k, n, out + k * ldo, ldo);
  });
}
#endif

// ---- a row back in the file's layout (pack_rows' inverse) ----

// 16 bytes of nibbles from Q4_K's two lines that put_line made of them: `low` (their low nibbles) and `high`.
void take_lines(const uint8_t* low, const uint8_t* high, uint8_t* dst) {
  for (int k = 0; k < 8; ++k) {
    dst[k] = (uint8_t)((low[k] & 0x0F) | (high[k] & 0x0F) << 4);
    dst[8 + k] = (uint8_t)((low[k] >> 4) | (high[k] & 0xF0));
  }
}

void unpack_q8_0(const uint8_t* group, int r, int64_t n, uint8_t* row) {
  for (int64_t b = 0; b < n / 32; ++b, group += kPackedQ8Bytes, row += 34) {
    std::memcpy(row, group + 2 * r, 2);
    for (int c = 0; c < 8; ++c)
      for (int e = 0; e < 4; ++e) row[2 + 4 * c + e] = (uint8_t)(int8_t)(group[16 + c * 32 + r * 4 + e] - 128);
  }
}

void unpack_q4_0(const uint8_t* group, int r, int64_t n, uint8_t* row) {
  for (int64_t b = 0; b < n / 32; ++b, group += kPackedQ4Bytes, row += 18) {
    std::memcpy(row, group + 2 * r, 2);
    take_lines(group + 16 + 8 * r, group + 80 + 8 * r, row + 2);
  }
}

void unpack_q4_k(const uint8_t* group, int r, int64_t n, uint8_t* row) {
  for (int64_t b = 0; b < n / 256; ++b, group += kPackedK4Bytes, row += 144) {
    std::memcpy(row, group + 2 * r, 2);
    std::memcpy(row + 2, group + 16 + 2 * r, 2);
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 8; ++s) sc[s] = group[32 + 8 * s + r], mn[s] = group[96 + 32 * (s / 4) + 4 * r + s % 4];
    uint8_t* q = row + 4;  // the 12 bytes of 6-bit scales and mins as ggml's get_scale_min_k4 reads them
    for (int j = 0; j < 4; ++j) {
      q[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
      q[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
      q[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | (mn[j + 4] & 0x0F) << 4);
    }
    for (int j = 0; j < 4; ++j)  // lines 4j + h (low nibbles) and 4j + h + 2 (high) came from qs[32j + 16h..]
      for (int h = 0; h < 2; ++h)
        take_lines(group + 160 + 64 * (4 * j + h) + 8 * r, group + 160 + 64 * (4 * j + h + 2) + 8 * r, row + 16 + 32 * j + 16 * h);
  }
}

void unpack_q6_k(const uint8_t* group, int r, int64_t n, uint8_t* row) {
  for (int64_t b = 0; b < n / 256; ++b, group += kPackedQ6Bytes, row += 210) {
    uint8_t q[256];  // the super-block's quants, 0-63
    for (int e = 0; e < 256; ++e) {
      const uint8_t low = group[144 + 64 * (e / 16) + 8 * r + e % 8];
      const uint8_t high = group[1168 + 64 * (e / 32) + 8 * r + e % 8] >> (2 * (e % 32 / 8));
      q[e] = (uint8_t)((e % 16 < 8 ? low & 0x0F : low >> 4) | (high & 3) << 4);
    }
    uint8_t *ql = row, *qh = row + 128;  // ggml's order: two halves of 128 elements, 64 ql and 32 qh bytes each
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* e = q + 128 * h + l;
        ql[64 * h + l] = (uint8_t)((e[0] & 0x0F) | (e[64] & 0x0F) << 4);
        ql[64 * h + l + 32] = (uint8_t)((e[32] & 0x0F) | (e[96] & 0x0F) << 4);
        qh[32 * h + l] = (uint8_t)(e[0] >> 4 | (e[32] >> 4) << 2 | (e[64] >> 4) << 4 | (e[96] >> 4) << 6);
      }
    for (int s = 0; s < 16; ++s) row[192 + s] = group[16 + 8 * s + r];
    std::memcpy(row + 208, group + 2 * r, 2);
  }
}

[[noreturn]] void no_packed_rows(DType t) {
  throw Error(std::string("no packed rows for tensor type ") + dtype_name(t) + " in this build");
}

// t's packed layout; `kernels`: and its dot kernels on this CPU.
const PackedRowsKernels& packed_of(DType t, bool kernels = false) {
  const PackedRowsKernels* k = dtype_traits(t).packed;
  if (!k || (kernels && !k->dot_tokens)) no_packed_rows(t);
  return *k;
}

// A 4-bit lines' layout: its dot kernels AVX-512's where the build has them, else AVX2's.
template <DType T>
constexpr PackedRowsKernels nibbles_layout(int block, size_t block_bytes,
                                           void (*pack)(const void* const*, int64_t, uint8_t*),
                                           void (*unpack)(const uint8_t*, int, int64_t, uint8_t*)) {
  PackedRowsKernels k{block, block_bytes, pack, unpack};
#if FASA_PACKED_K4
  k.dot_tokens = &dot_packed_nibbles<T>;
#elif defined(__AVX2__)
  k.dot_tokens = &dot_packed_nibbles_avx2<T>;
#endif
#if defined(__AVX2__)
  k.dot_tokens_avx2 = &dot_packed_nibbles_avx2<T>;
#endif
  return k;
}

}  // namespace

// Packed Q8_0 rows (their copy in huge pages) beat the tiles up to 32 tokens (llama3.2-1b Q8_0 pp32
// 91-95 t/s packed, 74-82 tiled; pp64 97-99 packed, 107-110 tiled; 2 threads, Zen 4). One token reads
// two groups side by side: one stream alone keeps too few reads in flight.
// With AVX2 alone (no tiles), every batch reads them, one group at a time (its kernel prefetches).
#if FASA_PACKED_Q8
constinit const PackedRowsKernels kPackedQ8_0{32, kPackedQ8Bytes, pack_q8_0, unpack_q8_0, dot_packed_tokens_q8,
                                    dot_packed_q8_0_avx2, dot_packed_rows_q8, 32};
#elif defined(__AVX2__)
constinit const PackedRowsKernels kPackedQ8_0{32, kPackedQ8Bytes, pack_q8_0, unpack_q8_0, dot_packed_q8_0_avx2,
                                    dot_packed_q8_0_avx2};
#else
constinit const PackedRowsKernels kPackedQ8_0{32, kPackedQ8Bytes, pack_q8_0, unpack_q8_0};
#endif
// The 4-bit layouts' rows beat the tiles at any batch: Q4_K's passes of 8 tokens beat them up to 128
// tokens and match them above (a [2048 x 2048] matmul on one Zen 4 thread: 0.030-0.036 ms a token packed
// at any batch, tiled 0.085 at 17 tokens falling to 0.048 at 128 and 0.035 at 256; pp512 of Q4_K_M 1B
// 199-213 t/s packed, 194-201 tiled), so the file's rows are not read again; AVX2's passes of 4 equal
// or beat AVX2's tiles too (docs/PERFORMANCE.md, "Packed rows with AVX2 alone").
constinit const PackedRowsKernels kPackedQ4_0 = nibbles_layout<DType::Q4_0>(32, kPackedQ4Bytes, pack_q4_0, unpack_q4_0),
                        kPackedQ4_K = nibbles_layout<DType::Q4_K>(256, kPackedK4Bytes, pack_q4_k, unpack_q4_k),
                        kPackedQ6_K = nibbles_layout<DType::Q6_K>(256, kPackedQ6Bytes, pack_q6_k, unpack_q6_k);

bool has_packed_rows(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr && tr->packed && tr->packed->dot_tokens;
}

size_t packed_group_bytes(DType t, int64_t n) {
  const PackedRowsKernels& k = packed_of(t);
  return (size_t)(n / k.block) * k.block_bytes;
}

int packed_rows_most_tokens(DType t) { return packed_of(t, true).most_tokens; }

void pack_rows(DType t, const void* const* rows, int64_t n, uint8_t* out) {
  static_assert(kDirectRows == 8, "the packed layouts hold 8 rows per group");
  packed_of(t).pack(rows, n, out);
}

void unpack_row_from_group(DType t, const uint8_t* group, int r, int64_t n, uint8_t* row) {
  packed_of(t).unpack(group, r, n, row);
}

const void* file_row(const Matrix& m, int64_t r, std::vector<uint8_t>& buf) {
  if (!m.packed || r >= m.rows / kDirectRows * kDirectRows) return m.row(r);  // (the last rows % 8 stay in the file)
  buf.resize(m.row_bytes);
  unpack_row_from_group(m.type, m.packed + r / kDirectRows * packed_group_bytes(m.type, m.cols), (int)(r % kDirectRows),
                        m.cols, buf.data());
  return buf.data();
}

void dot_packed_rows(DType t, const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs& x, int64_t n,
                     float* out) {
  const PackedRowsKernels& k = packed_of(t, true);
  if (k.dot_pair) return k.dot_pair(group_a, group_b, x, n, out);
  k.dot_tokens(group_a, &x, 1, n, out, 0);  // each group's own stream: the kernels prefetch their rows
  if (group_b) k.dot_tokens(group_b, &x, 1, n, out + kDirectRows, 0);
}

void dot_packed_tokens(DType t, const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                       int64_t ldo) {
  packed_of(t, true).dot_tokens(group, x, n_tokens, n, out, ldo);
}

}  // namespace fasa
