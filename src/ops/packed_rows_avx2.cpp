// The packed layouts (ops/packed_rows.h) with AVX2 alone: the 4-bit ones (Q4_K, Q6_K, Q4_0), then Q8_0
// (its own note below). In the 4-bit ones a 64-byte line is read as two halves of 4 rows; in each,
// int32 lanes 2r, 2r + 1 hold row r's two 4-column chunks of an 8-column run, as in the 512-bit
// kernels. vpmaddubsw's int16 pairs of a sub-block's runs are summed (they cannot overflow: |q_x| <= 127
// and q_w < 16, or < 64 for two runs of Q6_K), then one vpmaddwd by the rows' scales widens them, and
// vphaddd joins each row's two lanes: the same exact integer sums and float steps as dot_direct_rows,
// so the results are bit-identical to it.
#include "ops/packed_layout.h"

#include <algorithm>
#include <cstring>

#include "fasa/error.h"
#include "ops/hsum_avx.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fasa {

#if defined(__AVX2__)
namespace {

// Super-blocks (Q4_0: 16 blocks) ahead of use that the rows are asked for, an eighth of one with each
// eighth computed (packed_rows.cpp says why).
constexpr int kAhead = 4;

inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 8 bytes of p in every 64-bit lane.
inline __m256i broadcast8(const void* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

// The 4 nibble vectors of half h of lines a and a + 64 (32 columns): columns 0-7, 8-15, 16-23, 24-31
// of each 32, against the activations broadcast8(x), (x + 8), (x + 16), (x + 24).
struct Nibbles {
  __m256i w[4];
  Nibbles(const uint8_t* a, int h) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i raw0 = load(a + 32 * h), raw1 = load(a + 64 + 32 * h);
    w[0] = _mm256_and_si256(raw0, low4);
    w[1] = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), low4);
    w[2] = _mm256_and_si256(raw1, low4);
    w[3] = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), low4);
  }
};

// int16 lanes: the sums of pairs of products of runs k0 and k0 + 1 against xq's 16 activations.
inline __m256i pair_products(const __m256i* w, const int8_t* xq) {
  return _mm256_add_epi16(_mm256_maddubs_epi16(w[0], broadcast8(xq)), _mm256_maddubs_epi16(w[1], broadcast8(xq + 8)));
}

// Row r's sum in lane r, from the halves' lane pairs (rows 0-3 in a, 4-7 in b).
inline __m256i row_sums(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}

// Half h of the 8 rows' bytes v[0..8) as int16, each repeated in all 4 int16 of its row's lane pair
// (h 0: rows 0-3, 1: rows 4-7).
template <bool Signed>
inline __m256i lane_pair_scales(__m128i v, int h) {
  const __m128i twice = _mm_unpacklo_epi8(v, v);
  const __m128i four = h == 0 ? _mm_unpacklo_epi16(twice, twice) : _mm_unpackhi_epi16(twice, twice);
  return Signed ? _mm256_cvtepi8_epi16(four) : _mm256_cvtepu8_epi16(four);
}

inline __m256 fp16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Q4_K: per super-block dot_k4_row's isum and msum for the 8 rows, then its float steps in 8 lanes.
template <int NT>
void dot_k4(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = group + b * kPackedK4Bytes;
    __m256i isum[NT][2];  // per half: lanes 2r, 2r + 1 of row r's scaled sums
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // (unrolled: the accumulators stay in registers)
      __m256i acc[NT];
      for (auto& v : acc) v = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        if (h == 0) prefetch_lines(p + kAhead * kPackedK4Bytes + 160 * s, 160);  // 8 x 160 bytes cover the 1184
        const Nibbles q(p + 160 + 128 * s, h);
        const __m256i scale = lane_pair_scales<false>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 32 + 8 * s)), h);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x[t].q.data() + b * 256 + 32 * s;
          const __m256i sums = _mm256_add_epi16(pair_products(q.w, xq), pair_products(q.w + 2, xq + 16));
          acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(sums, scale));
        }
      }
      for (int t = 0; t < NT; ++t) isum[t][h] = acc[t];
    }
    // mins as int16, per half: lanes 2r, 2r + 1 of mins_a hold row r's mins of sub-blocks 0-1, 2-3; mins_b 4-5, 6-7
    __m256i mins_a[2], mins_b[2];
    for (int h = 0; h < 2; ++h) {
      mins_a[h] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 96 + 16 * h)));
      mins_b[h] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 128 + 16 * h)));
    }
    const __m256 d = fp16x8(p), dmin = fp16x8(p + 16);
    for (int t = 0; t < NT; ++t) {
      const int16_t* xs = x[t].sum32.data() + b * 8;
      __m256i msum[2];
      for (int h = 0; h < 2; ++h)
        msum[h] = _mm256_add_epi32(_mm256_madd_epi16(mins_a[h], broadcast8(xs)), _mm256_madd_epi16(mins_b[h], broadcast8(xs + 4)));
      const __m256 xd = _mm256_set1_ps(x[t].d[b]);
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(row_sums(isum[t][0], isum[t][1])), sum[t]);
      const __m256 neg_dmin = _mm256_xor_ps(_mm256_mul_ps(dmin, xd), _mm256_set1_ps(-0.0f));
      sum[t] = _mm256_fmadd_ps(neg_dmin, _mm256_cvtepi32_ps(row_sums(msum[0], msum[1])), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}

// Q6_K: per super-block dot_q6_k_row's isum less 32 times its offset (sum over sub-blocks of scale
// times the activations' sum) for the 8 rows, then its one float step. Each line is one sub-block.
template <int NT>
void dot_q6_k(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = group + b * kPackedQ6Bytes;
    __m256i isum[NT][2];  // per half: lanes 2r, 2r + 1 of row r's scaled sums
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i acc[NT];
      for (auto& v : acc) v = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {  // lines 2j and 2j + 1: sub-blocks 2j, 2j + 1
        if (h == 0) prefetch_lines(p + kAhead * kPackedQ6Bytes + 224 * j, 224);  // 8 x 224 bytes cover the 1680
        Nibbles q(p + 144 + 128 * j, h);
        const __m256i hb = load(p + 1168 + 64 * j + 32 * h);
        q.w[0] = _mm256_or_si256(q.w[0], _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
        q.w[1] = _mm256_or_si256(q.w[1], _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
        q.w[2] = _mm256_or_si256(q.w[2], _mm256_and_si256(hb, bits45));
        q.w[3] = _mm256_or_si256(q.w[3], _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 + 16 * j));  // [2][8 rows]
        const __m256i scale0 = lane_pair_scales<true>(sc8, h), scale1 = lane_pair_scales<true>(_mm_srli_si128(sc8, 8), h);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x[t].q.data() + b * 256 + 32 * j;
          acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(_mm256_madd_epi16(pair_products(q.w, xq), scale0),
                                                             _mm256_madd_epi16(pair_products(q.w + 2, xq + 16), scale1)));
        }
      }
      for (int t = 0; t < NT; ++t) isum[t][h] = acc[t];
    }
    // lane r: row r's scales of sub-blocks 2j, 2j + 1 as two int16, against the activations' sums per 16
    __m256i sc_pairs[8];
    for (int j = 0; j < 8; ++j) {
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 + 16 * j));
      sc_pairs[j] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc8, _mm_srli_si128(sc8, 8)));
    }
    const __m256 d = fp16x8(p);
    for (int t = 0; t < NT; ++t) {
      const int32_t* s16 = x[t].sum16.data() + b * 16;
      __m256i offset = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j)
        offset = _mm256_add_epi32(offset, _mm256_madd_epi16(sc_pairs[j], _mm256_set1_epi32(int16_pair(s16[2 * j], s16[2 * j + 1]))));
      const __m256i rows = _mm256_sub_epi32(row_sums(isum[t][0], isum[t][1]), _mm256_slli_epi32(offset, 5));
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t].d[b])), _mm256_cvtepi32_ps(rows), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}

// Q4_0: per block each row's exact integer sum less 8 times the activations' sum, then one float step.
template <int NT>
void dot_q4_0(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 sum[NT];
  for (auto& s : sum) s = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = group + b * kPackedQ4Bytes;
    prefetch_lines(p + 4 * kAhead * kPackedQ4Bytes, kPackedQ4Bytes);
    const Nibbles q0(p + 16, 0), q1(p + 16, 1);
    const __m256 d = fp16x8(p);
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 32;
      const __m256i h0 = _mm256_madd_epi16(_mm256_add_epi16(pair_products(q0.w, xq), pair_products(q0.w + 2, xq + 16)), ones);
      const __m256i h1 = _mm256_madd_epi16(_mm256_add_epi16(pair_products(q1.w, xq), pair_products(q1.w + 2, xq + 16)), ones);
      const __m256i rows = _mm256_add_epi32(row_sums(h0, h1), _mm256_set1_epi32(-8 * (int32_t)x[t].sum32[b]));
      sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t].d[b])), _mm256_cvtepi32_ps(rows), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out + t * ldo, sum[t]);
}

// ---- Q8_0 ----
// The packed bytes are q + 128 (the VNNI layout); xor 0x80 gives q back, and vpmaddubsw multiplies |q|
// by the activations with q's sign (dot_blocks' trick, add_products4). Lane r of a chunk's products is row r's exact
// sum over the chunk's 4 columns; acc[c] += d_w * d_x * sum in float per block: dot_blocks' lanes (one per
// row and chunk) and order, then its horizontal sum of each row's 8 chunk lanes, so bit-identical to it.

// Lane r: row r's exact sum over a chunk's 4 columns (w: its 8 rows' quants, magnitude: |w|) against
// the 4 activations at xq.
inline __m256i q8_chunk_sums(__m256i w, __m256i magnitude, const int8_t* xq) {
  int32_t x4;
  std::memcpy(&x4, xq, 4);
  return add_products4(_mm256_setzero_si256(), magnitude, _mm256_sign_epi8(_mm256_set1_epi32(x4), w));
}

inline __m256i q8_weights(const uint8_t* chunk) { return _mm256_xor_si256(load(chunk), _mm256_set1_epi8(-128)); }

// out[r] = row r's sum from its 8 chunk lanes: acc[c] lane r -> transposed, each row's lanes added.
inline void store_row_sums(__m256 acc[8], float* out) {
  transpose8(acc);
  for (int r = 0; r < 8; ++r) out[r] = hsum_avx(acc[r]);
}

// One token (decode): the group in one pass, block by block.
void dot_q8_0_one(const uint8_t* group, const QuantizedActs& x, int64_t n, float* out) {
  __m256 acc[8];  // acc[c] lane r: row r's running sum of its chunk-c sums
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* p = group + b * kPackedQ8Bytes;
    prefetch_lines(p + kAhead * kPackedQ8Bytes, kPackedQ8Bytes);
    const __m256 d = _mm256_mul_ps(fp16x8(p), _mm256_set1_ps(x.d[b]));
    for (int c = 0; c < 8; ++c) {
      const __m256i w = q8_weights(p + 16 + 32 * c);
      const __m256i sums = q8_chunk_sums(w, _mm256_sign_epi8(w, w), x.q.data() + b * 32 + 4 * c);
      acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[c]);
    }
  }
  store_row_sums(acc, out);
}

// NT tokens (prefill, small batches), a strip of blocks at a time: per chunk one pass over the strip, so
// each token's running sums of that chunk fit one register and each chunk's weights, loaded and signed
// once, serve all NT tokens; the strip's weights, activations and scales stay in L1 across the 8 passes
// (whole rows' would not: 8 passes from L2 ran at 0.9x llama.cpp's pp512). A lane's sums continue from
// strip to strip in memory, in the same order.   x: [NT]; out[t * ldo + r]
template <int NT>
void dot_q8_0_tokens(const uint8_t* group, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  constexpr int kStrip = 16;  // blocks: 4.25 KiB of weights, 4 KiB of scales and 512 bytes of each token's activations
  __m256 sums[NT][8];  // sums[t][c] lane r: row r's sum of its chunk-c sums for token t
  for (auto& a : sums)
    for (auto& c : a) c = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < n / 32; b0 += kStrip) {
    const int strip = (int)std::min<int64_t>(kStrip, n / 32 - b0);
    __m256 d[kStrip][NT];  // the rows' scales times token t's, per block
    for (int i = 0; i < strip; ++i) {
      const __m256 dw = fp16x8(group + (b0 + i) * kPackedQ8Bytes);
      for (int t = 0; t < NT; ++t) d[i][t] = _mm256_mul_ps(dw, _mm256_set1_ps(x[t].d[b0 + i]));
    }
    for (int c = 0; c < 8; ++c) {
      __m256 acc[NT];
      for (int t = 0; t < NT; ++t) acc[t] = sums[t][c];
      for (int i = 0; i < strip; ++i) {
        const int64_t b = b0 + i;
        const uint8_t* p = group + b * kPackedQ8Bytes;
        if (c == 0) prefetch_lines(p + kAhead * kPackedQ8Bytes, kPackedQ8Bytes);
        const __m256i w = q8_weights(p + 16 + 32 * c), magnitude = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          const __m256i s = q8_chunk_sums(w, magnitude, x[t].q.data() + b * 32 + 4 * c);
          acc[t] = _mm256_fmadd_ps(d[i][t], _mm256_cvtepi32_ps(s), acc[t]);
        }
      }
      for (int t = 0; t < NT; ++t) sums[t][c] = acc[t];
    }
  }
  for (int t = 0; t < NT; ++t) store_row_sums(sums[t], out + t * ldo);
}

}  // namespace
#endif

#if defined(__AVX2__)
void dot_packed_q8_0_avx2(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                          int64_t ldo) {
  in_token_passes<8>(n_tokens, [&]<int NT>(int k) {
    if constexpr (NT == 1) dot_q8_0_one(group, x[k], n, out + k * ldo);
    else dot_q8_0_tokens<NT>(group, x + k, n, out + k * ldo, ldo);
  });
}

template <DType T>
void dot_packed_nibbles_avx2(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                             int64_t ldo) {
  in_token_passes<4>(n_tokens, [&]<int NT>(int k) {
    if constexpr (T == DType::Q4_K) dot_k4<NT>(group, x + k, n, out + k * ldo, ldo);
    else if constexpr (T == DType::Q6_K) dot_q6_k<NT>(group, x + k, n, out + k * ldo, ldo);
    else dot_q4_0<NT>(group, x + k, n, out + k * ldo, ldo);
  });
}
template void dot_packed_nibbles_avx2<DType::Q4_0>(const uint8_t*, const QuantizedActs*, int, int64_t, float*, int64_t);
template void dot_packed_nibbles_avx2<DType::Q4_K>(const uint8_t*, const QuantizedActs*, int, int64_t, float*, int64_t);
template void dot_packed_nibbles_avx2<DType::Q6_K>(const uint8_t*, const QuantizedActs*, int, int64_t, float*, int64_t);
#endif

}  // namespace fasa
