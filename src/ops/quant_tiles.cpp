#include "ops/quant_tiles.h"

#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define FASA_QUANT_TILES 1
#include <immintrin.h>
#endif

#include "fasa/error.h"
#include "ops/packed_rows.h"

namespace fasa {

namespace {

#if FASA_QUANT_TILES
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (the unmasked forms' undefined source).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr int R = kTileGroupRows;

// One group of 16 K-quant rows unpacked, per super-block b of 256 columns:
struct PackedGroup {
  std::vector<uint8_t> q;      // [n/256][64 chunks][16 rows][4] the quants as unsigned bytes (Q6_K: + 32)
  std::vector<int32_t> scale;  // [n/256][subs][16] integer scale per sub-block and row
  std::vector<int32_t> pairs;  // [n/256][subs/2][16] two int16 per row: the mins (Q4_K, Q5_K) or the
                               // scales (Q6_K) of sub-blocks 2k and 2k+1, for the activation-sum term
  std::vector<float> d, dmin;  // [n/256][16]
};

void pack_group(DType t, const void* const* rows, int64_t n, PackedGroup& g) {
  const bool q6 = t == DType::Q6_K;
  const int subs = q6 ? 16 : 8;
  const int64_t nb = n / 256;
  g.q.resize((size_t)nb * 256 * R);
  g.scale.resize((size_t)nb * subs * R);
  g.pairs.resize((size_t)nb * subs / 2 * R);
  g.d.resize((size_t)nb * R);
  g.dmin.assign((size_t)nb * R, 0.0f);
  thread_local UnpackedRow u;
  for (int r = 0; r < R; ++r) {
    unpack_row(t, rows[r], n, u);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* q = &g.q[(size_t)b * 256 * R];
      const int8_t* uq = &u.q[b * 256];
      for (int c = 0; c < 64; ++c)
        for (int e = 0; e < 4; ++e) q[(c * R + r) * 4 + e] = (uint8_t)(uq[4 * c + e] + (q6 ? 32 : 0));
      for (int s = 0; s < subs; ++s) g.scale[(b * subs + s) * R + r] = u.iscale[b * subs + s];
      const int16_t* pair_src = q6 ? &u.iscale[b * subs] : &u.imin[b * subs];
      for (int k = 0; k < subs / 2; ++k)
        g.pairs[(b * subs / 2 + k) * R + r] =
            (int32_t)((uint32_t)(uint16_t)pair_src[2 * k] | ((uint32_t)(uint16_t)pair_src[2 * k + 1] << 16));
      g.d[b * R + r] = u.d[b];
      if (!q6) g.dmin[b * R + r] = u.dmin[b];
    }
  }
}

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Two activation sums packed as int16 (each fits: at most 32 * 128).
inline __m512i broadcast_pair(int32_t lo, int32_t hi) {
  return _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16)));
}

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

// One group of 16 Q8_0 rows, per block b of 32 columns:
struct PackedQ8 {
  std::vector<uint8_t> q;  // [n/32][8 chunks][16 rows][4] the quants + 128
  std::vector<float> d;    // [n/32][16] the rows' scales
};

void pack_q8_0(const void* const* rows, int64_t n, PackedQ8& g) {
  const int64_t nb = n / 32;
  g.q.resize((size_t)nb * 32 * R);
  g.d.resize((size_t)nb * R);
  for (int r = 0; r < R; ++r) {
    const uint8_t* p = static_cast<const uint8_t*>(rows[r]);
    for (int64_t b = 0; b < nb; ++b, p += 34) {
      g.d[b * R + r] = fp16_at(p);
      uint8_t* q = &g.q[(size_t)b * 32 * R];
      for (int c = 0; c < 8; ++c)
        for (int e = 0; e < 4; ++e) q[(c * R + r) * 4 + e] = (uint8_t)((int8_t)p[2 + 4 * c + e] + 128);
    }
  }
}

// The same group from two groups of 8 rows packed for decode (ops/packed_rows.h): their 4-column
// chunks of 8 rows' quants + 128 are the tile's bytes for rows 0-7 and 8-15.
void unpack_decode_groups_q8_0(const uint8_t* group_a, const uint8_t* group_b, int64_t n, PackedQ8& g) {
  const int64_t nb = n / 32;
  const size_t block_bytes = packed_group_bytes(DType::Q8_0, 32);  // 8 fp16 scales + 8 chunks x 8 rows x 4
  g.q.resize((size_t)nb * 32 * R);
  g.d.resize((size_t)nb * R);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* half[2] = {group_a + b * block_bytes, group_b + b * block_bytes};
    uint8_t* q = &g.q[(size_t)b * 32 * R];
    for (int h = 0; h < 2; ++h) {
      for (int r = 0; r < 8; ++r) g.d[b * R + 8 * h + r] = fp16_at(half[h] + 2 * r);
      for (int c = 0; c < 8; ++c) std::memcpy(q + (c * R + 8 * h) * 4, half[h] + 16 + c * 32, 32);
    }
  }
}

// TT tokens against a packed Q8_0 group: per row and token, eight float lanes (one per 4-column chunk
// of a block) accumulate d_w * d_x * chunk sum over the blocks, as dot_direct's 8-lane vector does.
template <int TT>
void multiply_q8_tokens(const PackedQ8& g, const QuantizedActs* x, int64_t n, float* y, int64_t ldy) {
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

void multiply_all_q8(const PackedQ8& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy) {
  constexpr int kTokens = 2;  // per pass: eight accumulators per token fill the registers
  int k = 0;
  for (; k + kTokens <= n_tokens; k += kTokens) multiply_q8_tokens<kTokens>(g, x + k, n, y + k * ldy, ldy);
  for (; k < n_tokens; ++k) multiply_q8_tokens<1>(g, x + k, n, y + k * ldy, ldy);
}

template <bool Q6>
void multiply_all(const PackedGroup& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy) {
  constexpr int kTokens = 4;  // per pass over the group: each weight load serves this many
  int t = 0;
  for (; t + kTokens <= n_tokens; t += kTokens) multiply_tokens<Q6, kTokens>(g, x + t, n, y + t * ldy, ldy);
  for (; t < n_tokens; ++t) multiply_tokens<Q6, 1>(g, x + t, n, y + t * ldy, ldy);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

bool has_quant_tiles(DType t) {
#if FASA_QUANT_TILES
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K || t == DType::Q8_0;
#else
  (void)t;
  return false;
#endif
}

void quant_tile(DType t, const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                 int64_t ldy) {
  if (!has_quant_tiles(t)) throw Error(std::string("no tiled kernel for tensor type ") + dtype_name(t));
#if FASA_QUANT_TILES
  if (t == DType::Q8_0) {
    thread_local PackedQ8 q8;
    pack_q8_0(rows, n, q8);
    return multiply_all_q8(q8, x, n_tokens, n, y, ldy);
  }
  thread_local PackedGroup g;
  pack_group(t, rows, n, g);
  if (t == DType::Q6_K)
    multiply_all<true>(g, x, n_tokens, n, y, ldy);
  else
    multiply_all<false>(g, x, n_tokens, n, y, ldy);
#else
  (void)rows, (void)x, (void)n_tokens, (void)n, (void)y, (void)ldy;
#endif
}

void quant_tile_packed_q8_0(const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs* x, int n_tokens,
                            int64_t n, float* y, int64_t ldy) {
  if (!has_quant_tiles(DType::Q8_0)) throw Error("no tiled kernel for tensor type Q8_0");
#if FASA_QUANT_TILES
  thread_local PackedQ8 q8;
  unpack_decode_groups_q8_0(group_a, group_b, n, q8);
  multiply_all_q8(q8, x, n_tokens, n, y, ldy);
#else
  (void)group_a, (void)group_b, (void)x, (void)n_tokens, (void)n, (void)y, (void)ldy;
#endif
}

}  // namespace fasa
