// The tiles' 512-bit kernels (AVX512-VNNI): one vpdpbusd adds 4 products to each of the 16 rows' sums.
#include "ops/quant_tile_layout.h"

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

#include <cstring>

namespace fasa {

namespace {

// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (the unmasked forms' undefined source).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr int R = kTileGroupRows;

inline __m512i broadcast4(const int8_t* p) { return _mm512_set1_epi32(quad_at(p)); }

// Two activation sums packed as int16 (each fits: at most 32 * 128).
inline __m512i broadcast_pair(int32_t lo, int32_t hi) { return _mm512_set1_epi32(int16_pair(lo, hi)); }

// TT tokens against the packed group: per super-block the exact integer sums for 16 rows in 16 lanes,
// then dot_direct's fused float steps (std::fma there, whatever the compiler).   y: TT rows with stride ldy
template <bool Q6, int TT>
void multiply_tokens(const PackedGroup& g, const QuantizedActs* x, int64_t n, float* y, int64_t ldy) {
  constexpr int kSubs = Q6 ? 16 : 8, kChunks = 64 / kSubs;  // 4-column chunks per sub-block
  __m512 acc[TT];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* q = &g.q[(size_t)b * 256 * R];
    const int8_t* xq[TT];
    for (int t = 0; t < TT; ++t) xq[t] = x[t].q.data() + b * 256;
    __m512i isum[TT], other[TT];  // other: the mins' sum (Q4_K, Q5_K) or the + 32 offset's (Q6_K)
    for (int t = 0; t < TT; ++t) isum[t] = other[t] = _mm512_setzero_si512();
    for (int s = 0; s < kSubs; ++s) {
      __m512i part[TT];
      for (auto& p : part) p = _mm512_setzero_si512();
      for (int c = s * kChunks; c < (s + 1) * kChunks; ++c) {
        const __m512i w = _mm512_loadu_si512(q + c * 4 * R);
        for (int t = 0; t < TT; ++t) part[t] = _mm512_dpbusd_epi32(part[t], w, broadcast4(xq[t] + 4 * c));
      }
      const __m512i sc = _mm512_loadu_si512(&g.scale[(b * kSubs + s) * R]);
      for (int t = 0; t < TT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(part[t], sc));
    }
    for (int k = 0; k < kSubs / 2; ++k) {
      const __m512i m = _mm512_loadu_si512(&g.pairs[(b * kSubs / 2 + k) * R]);
      for (int t = 0; t < TT; ++t) {
        const int32_t* s16 = x[t].sum16.data() + b * 16;
        const __m512i xs = Q6 ? broadcast_pair(s16[2 * k], s16[2 * k + 1])
                              : broadcast_pair(s16[4 * k] + s16[4 * k + 1], s16[4 * k + 2] + s16[4 * k + 3]);
        other[t] = _mm512_dpwssd_epi32(other[t], m, xs);
      }
    }
    const __m512 d = _mm512_loadu_ps(&g.d[b * R]);
    for (int t = 0; t < TT; ++t) {
      const __m512 xd = _mm512_set1_ps(x[t].d[b]);
      if constexpr (Q6) {
        const __m512i sum = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(other[t], 5));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xd), _mm512_cvtepi32_ps(sum), acc[t]);
      } else {
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xd), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        const __m512 dmin = _mm512_loadu_ps(&g.dmin[b * R]);
        acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, xd), _mm512_cvtepi32_ps(other[t]), acc[t]);
      }
    }
  }
  for (int t = 0; t < TT; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// TT tokens against a packed Q8_0 group: per row and token, eight float lanes (one per 4-column chunk
// of a block) accumulate d_w * d_x * chunk sum over the blocks, as dot_direct's 8-lane vector does.
template <int TT>
void multiply_q8_tokens(const PackedBlocks& g, const QuantizedActs* x, int64_t n, float* y, int64_t ldy) {
  __m512 acc[TT][8];
  for (auto& a : acc)
    for (auto& c : a) c = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 dw = _mm512_loadu_ps(&g.d[b * R]);
    __m512 d[TT];
    for (int t = 0; t < TT; ++t) d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(x[t].d[b]));
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_loadu_si512(&g.q[((size_t)b * 8 + c) * 4 * R]);
      for (int t = 0; t < TT; ++t) {
        // (w + 128) . x - 128 * sum(x) = w . x
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_set1_epi32(x[t].minus128_sum4[b * 8 + c]), w,
                                                broadcast4(x[t].q.data() + b * 32 + 4 * c));
        acc[t][c] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(sum), acc[t][c]);
      }
    }
  }
  for (int t = 0; t < TT; ++t) {  // the eight lanes summed in hsum_avx's order
    const __m512 a = _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][4]), _mm512_add_ps(acc[t][2], acc[t][6]));
    const __m512 b = _mm512_add_ps(_mm512_add_ps(acc[t][1], acc[t][5]), _mm512_add_ps(acc[t][3], acc[t][7]));
    _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(a, b));
  }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

template <DType T>
void multiply_k_group(const PackedGroup& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy) {
  // 4 tokens a pass over the group: each weight load serves this many
  in_token_passes<4>(n_tokens,
                     [&]<int NT>(int k) { multiply_tokens<T == DType::Q6_K, NT>(g, x + k, n, y + k * ldy, ldy); });
}
template void multiply_k_group<DType::Q4_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_k_group<DType::Q5_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);
template void multiply_k_group<DType::Q6_K>(const PackedGroup&, const QuantizedActs*, int, int64_t, float*, int64_t);

void multiply_q8_0_group(const PackedBlocks& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                         int64_t ldy) {
  // 2 tokens a pass: eight accumulators per token fill the registers
  in_token_passes<2>(n_tokens, [&]<int NT>(int k) { multiply_q8_tokens<NT>(g, x + k, n, y + k * ldy, ldy); });
}

}  // namespace fasa
#endif
