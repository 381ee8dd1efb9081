// The tiles' AVX2 kernels: without vpdpbusd, the 16 rows in two halves of 8 int32 lanes. vpmaddubsw
// multiplies the unsigned quants by the signed activations (|q_x| <= 127) and adds pairs into int16;
// kSum chunks' pairs add up there exactly (kSum * 2 * 127 * the largest quant < 32768: 8 chunks of
// Q4_K's, Q4_0's or Q4_1's 15, 4 of Q5_K's, Q5_0's or Q5_1's 31, 2 of Q6_K's 63), then one vpmaddwd per
// kSum chunks widens them to int32, by the rows' sub-block scales (K-quants) or by one (the 32-element
// formats). Per super-block or block the same
// exact integer sums as dot_direct, then its fused float steps: bit-identical results.
#include "ops/block32_layout.h"
#include "ops/quant_tile_layout.h"

#if defined(__AVX2__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace fasa {

namespace {

constexpr int R = kTileGroupRows;

inline __m256i broadcast4(const int8_t* p) { return _mm256_set1_epi32(quad_at(p)); }

// Two activation sums packed as int16 (each fits: at most 32 * 128).
inline __m256i broadcast_pair(int32_t lo, int32_t hi) { return _mm256_set1_epi32(int16_pair(lo, hi)); }

// Eight rows' int32 scales as int16 pairs (s, s), for vpmaddwd.
inline __m256i scale_pairs(const int32_t* scale) {
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scale));
  return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s, 16));
}

// pairs[t][h] += the int16 pair sums of chunks c0..c0 + kSum - 1 for TT tokens.   q: the chunks' bytes
template <int kSum, int TT>
inline void add_chunks(const uint8_t* q, const int8_t* const* xq, int c0, __m256i (&pairs)[TT][2]) {
  for (auto& p : pairs) p[0] = p[1] = _mm256_setzero_si256();
  for (int c = c0; c < c0 + kSum; ++c) {
    const __m256i* w = reinterpret_cast<const __m256i*>(q + c * 4 * R);
    const __m256i w0 = _mm256_loadu_si256(w), w1 = _mm256_loadu_si256(w + 1);
    for (int t = 0; t < TT; ++t) {
      const __m256i xb = broadcast4(xq[t] + 4 * c);
      pairs[t][0] = _mm256_add_epi16(pairs[t][0], _mm256_maddubs_epi16(w0, xb));
      pairs[t][1] = _mm256_add_epi16(pairs[t][1], _mm256_maddubs_epi16(w1, xb));
    }
  }
}

// TT tokens against a K-quant group. The float sums live in y between super-blocks.   y: TT rows, stride ldy
template <bool Q6, int kSum, int TT>
void multiply_k_tokens(const PackedGroup& g, const QuantizedActs* x, int64_t n, float* y, int64_t ldy) {
  constexpr int kSubs = Q6 ? 16 : 8, kChunks = 64 / kSubs;  // 4-column chunks per sub-block
  static_assert(kChunks % kSum == 0);
  for (int t = 0; t < TT; ++t) std::fill_n(y + t * ldy, R, 0.0f);
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* q = &g.q[(size_t)b * 256 * R];
    const int8_t* xq[TT];
    for (int t = 0; t < TT; ++t) xq[t] = x[t].q.data() + b * 256;
    __m256i isum[TT][2];
    for (auto& i : isum) i[0] = i[1] = _mm256_setzero_si256();
    for (int s = 0; s < kSubs; ++s) {
      const int32_t* scale = &g.scale[(b * kSubs + s) * R];
      const __m256i sc[2] = {scale_pairs(scale), scale_pairs(scale + 8)};
      for (int c0 = s * kChunks; c0 < (s + 1) * kChunks; c0 += kSum) {
        __m256i pairs[TT][2];
        add_chunks<kSum>(q, xq, c0, pairs);
        for (int t = 0; t < TT; ++t)
          for (int h = 0; h < 2; ++h) isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pairs[t][h], sc[h]));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i* m = reinterpret_cast<const __m256i*>(&g.pairs[b * kSubs / 2 * R + 8 * h]);
      const __m256 d = _mm256_loadu_ps(&g.d[b * R + 8 * h]), dmin = _mm256_loadu_ps(&g.dmin[b * R + 8 * h]);
      for (int t = 0; t < TT; ++t) {
        const int32_t* s16 = x[t].sum16.data() + b * 16;
        __m256i other = _mm256_setzero_si256();  // the mins' sum (Q4_K, Q5_K) or the + 32 offset's (Q6_K)
        for (int k = 0; k < kSubs / 2; ++k) {
          const __m256i xs = Q6 ? broadcast_pair(s16[2 * k], s16[2 * k + 1])
                                : broadcast_pair(s16[4 * k] + s16[4 * k + 1], s16[4 * k + 2] + s16[4 * k + 3]);
          other = _mm256_add_epi32(other, _mm256_madd_epi16(_mm256_loadu_si256(m + 2 * k), xs));
        }
        const __m256 xd = _mm256_set1_ps(x[t].d[b]);
        float* out = y + t * ldy + 8 * h;
        __m256 acc = _mm256_loadu_ps(out);
        if constexpr (Q6) {
          const __m256i sum = _mm256_sub_epi32(isum[t][h], _mm256_slli_epi32(other, 5));
          acc = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(sum), acc);
        } else {
          acc = _mm256_fmadd_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(isum[t][h]), acc);
          acc = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, xd), _mm256_cvtepi32_ps(other), acc);
        }
        _mm256_storeu_ps(out, acc);
      }
    }
  }
}

// TT tokens against a group of a 4- or 5-bit 32-element format (quants 0-15 or 0-31): per block,
// isum = sum((q - bias) * q_x) = sum(q * q_x) - bias * sum(q_x), acc = fma(d_w * d_x, isum, acc) and with
// an offset acc = fma(m_w * d_x, sum(q_x), acc), as dot_direct's rows do (kSum: see the top).
template <Block32Layout L, int TT>
void multiply_block32_tokens(const PackedBlocks& g, const QuantizedActs* x, int64_t n, float* y, int64_t ldy) {
  constexpr int kSum = L.fifth ? 4 : 8;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[TT][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const int8_t* xq[TT];
    for (int t = 0; t < TT; ++t) xq[t] = x[t].q.data() + b * 32;
    __m256i isum[TT][2];
    for (int t = 0; t < TT; ++t)
      for (int h = 0; h < 2; ++h) isum[t][h] = _mm256_set1_epi32(-L.bias * x[t].sum32[b]);
    for (int c0 = 0; c0 < 8; c0 += kSum) {
      __m256i pairs[TT][2];
      add_chunks<kSum>(&g.q[(size_t)b * 32 * R], xq, c0, pairs);
      for (int t = 0; t < TT; ++t)
        for (int h = 0; h < 2; ++h) isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pairs[t][h], ones));
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_loadu_ps(&g.d[b * R + 8 * h]);
      for (int t = 0; t < TT; ++t) {
        const __m256 dx = _mm256_set1_ps(x[t].d[b]);
        acc[t][h] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[t][h]), acc[t][h]);
        if constexpr (L.offset)
          acc[t][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(&g.m[b * R + 8 * h]), dx),
                                      _mm256_set1_ps((float)x[t].sum32[b]), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < TT; ++t) {
    _mm256_storeu_ps(y + t * ldy, acc[t][0]);
    _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
  }
}

constexpr int kTokens = 2;  // per pass over a group: each weight load serves this many (4 spill: 0.7x)

}  // namespace

#if !(defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__))
template <DType T>
void multiply_k_group(const PackedGroup& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy) {
  // chunks whose products are summed in int16 before they could overflow: fewer the wider the quants
  constexpr int kSum = T == DType::Q6_K ? 2 : T == DType::Q5_K ? 4 : 8;
  in_token_passes<kTokens>(n_tokens, [&]<int NT>(int k) {
    multiply_k_tokens<T == DType::Q6_K, kSum, NT>(g, x + k, n, y + k * ldy, ldy);
  });
}
template void multiply_k_group<DType::Q4_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_k_group<DType::Q5_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_k_group<DType::Q6_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);
#endif

template <DType T>
void multiply_block32_group(const PackedBlocks& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                            int64_t ldy) {
  in_token_passes<kTokens>(n_tokens, [&]<int NT>(int k) {
    multiply_block32_tokens<*block32_layout(T), NT>(g, x + k, n, y + k * ldy, ldy);
  });
}
template void multiply_block32_group<DType::Q4_0>(const PackedBlocks&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_block32_group<DType::Q4_1>(const PackedBlocks&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_block32_group<DType::Q5_0>(const PackedBlocks&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_block32_group<DType::Q5_1>(const PackedBlocks&, const QuantizedActs*, int, int64_t, float*, int64_t);

}  // namespace fasa
#endif
