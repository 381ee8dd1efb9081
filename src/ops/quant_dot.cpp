#include "ops/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define FASA_KQUANT_512 1  // the K-quants' decode kernels in 512-bit VNNI, else in AVX2
#endif

#include "fasa/error.h"
#include "ops/block32_layout.h"
#include "ops/dtype_kernels.h"
#include "ops/hsum_avx.h"

namespace fasa {

namespace {

// Sizes out for n elements: float scales and offsets per block (32-element formats), or integer scales
// and mins per sub-block with d and dmin per super-block (K-quants).
void resize(UnpackedRow& out, int sub, bool has_offset, bool k_quant, int64_t n) {
  out.sub = sub;
  out.has_offset = has_offset;
  out.k_quant = k_quant;
  out.q.resize(n);
  if (k_quant) {
    out.iscale.resize(n / sub);
    out.imin.assign(n / sub, 0);
    out.d.resize(n / 256);
    out.dmin.assign(n / 256, 0.0f);
  } else {
    out.scale.resize(n / sub);
    out.offset.assign(n / sub, 0.0f);
  }
}

// The 32-element formats: nibble j of a block (with a 5th bit from qh where given) minus `bias`.
void unpack_32(const uint8_t* p, int64_t n, int block_bytes, bool has_min, bool has_qh, int bias, UnpackedRow& out) {
  resize(out, 32, has_min, false, n);
  for (int64_t b = 0; b < n / 32; ++b, p += block_bytes) {
    out.scale[b] = fp16_at(p);
    if (has_min) out.offset[b] = fp16_at(p + 2);
    const uint8_t* qh = p + (has_min ? 4 : 2);
    const uint8_t* qs = qh + (has_qh ? 4 : 0);
    uint32_t hb = 0;
    if (has_qh) std::memcpy(&hb, qh, 4);
    int8_t* q = &out.q[b * 32];
    for (int j = 0; j < 16; ++j) {
      q[j] = (int8_t)((qs[j] & 0x0F) + (int)(((hb >> j) & 1) << 4) - bias);
      q[j + 16] = (int8_t)((qs[j] >> 4) + (int)(((hb >> (j + 16)) & 1) << 4) - bias);
    }
  }
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scale and min; w = d*sc*q - dmin*m.
void unpack_k4(const uint8_t* p, int64_t n, bool fifth_bit, UnpackedRow& out) {
  resize(out, 32, true, true, n);
  const int block_bytes = fifth_bit ? 176 : 144;
  for (int64_t b = 0; b < n / 256; ++b, p += block_bytes) {
    out.d[b] = fp16_at(p);
    out.dmin[b] = fp16_at(p + 2);
    const uint8_t* sc = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* qs = p + (fifth_bit ? 48 : 16);
    for (int s = 0; s < 8; ++s) {
      out.iscale[b * 8 + s] = (int16_t)(s < 4 ? sc[s] & 63 : (sc[s + 4] & 0x0F) | ((sc[s - 4] >> 6) << 4));
      out.imin[b * 8 + s] = (int16_t)(s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
    }
    // Byte l of group g holds element l of sub-block 2g (low nibble) and 2g+1 (high nibble).
    for (int g = 0; g < 4; ++g) {
      int8_t* q = &out.q[b * 256 + g * 64];
      for (int l = 0; l < 32; ++l) {
        const uint8_t v = qs[g * 32 + l];
        q[l] = (int8_t)((v & 0x0F) + (fifth_bit && ((qh[l] >> (2 * g)) & 1) ? 16 : 0));
        q[l + 32] = (int8_t)((v >> 4) + (fifth_bit && ((qh[l] >> (2 * g + 1)) & 1) ? 16 : 0));
      }
    }
  }
}

template <int SUB>
int32_t int_dot(const int8_t* a, const int8_t* b) {
  int32_t isum = 0;
#pragma omp simd reduction(+ : isum)
  for (int i = 0; i < SUB; ++i) isum += (int16_t)a[i] * (int16_t)b[i];
  return isum;
}

// The 32-element formats: exact int32 sums per block, then the float combination.
float dot_blocks_of_32(const UnpackedRow& w, const QuantizedActs& x) {
  const int64_t n_blocks = (int64_t)w.q.size() / 32;
  float sum = 0.0f;
  for (int64_t s = 0; s < n_blocks; ++s) {  // the direct kernels' fused steps, in their order
    sum = std::fma(w.scale[s] * x.d[s], (float)int_dot<32>(&w.q[s * 32], &x.q[s * 32]), sum);
    if (w.has_offset) sum = std::fma(w.offset[s] * x.d[s], (float)x.sum32[s], sum);
  }
  return sum;
}

// The K-quants: integer sums over each super-block of 256 (activations in Q8_K, one scale per 256).
template <int SUB>
float dot_super_blocks(const UnpackedRow& w, const QuantizedActs& x) {
  constexpr int kSubs = 256 / SUB;
  const int64_t n_super = (int64_t)w.q.size() / 256;
  float sum = 0.0f;
  for (int64_t b = 0; b < n_super; ++b) {
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < kSubs; ++s) {
      const int64_t at = b * 256 + s * SUB;
      isum += w.iscale[b * kSubs + s] * int_dot<SUB>(&w.q[at], &x.q[at]);
      if (w.has_offset) {
        int32_t xs = 0;
        for (int k = 0; k < SUB / 16; ++k) xs += x.sum16[at / 16 + k];
        msum += w.imin[b * kSubs + s] * xs;
      }
    }
    // Explicit fused steps: every kernel below rounds them the same way, whatever the compiler fuses.
    sum = std::fma(w.d[b] * x.d[b], (float)isum, sum);
    if (w.has_offset) sum = std::fma(-(w.dmin[b] * x.d[b]), (float)msum, sum);
  }
  return sum;
}

}  // namespace

bool uses_quantized_acts(DType t) {
  const DTypeTraits* tr = dtype_traits((uint32_t)t);
  return tr && tr->unpack;
}

void quantize_acts(DType weight_type, const float* x, int64_t n, QuantizedActs& out) {
  const DTypeTraits* tr = dtype_traits((uint32_t)weight_type);
  const bool k = tr && tr->block == 256;  // a super-block's activations share one scale (Q8_K's groups)
  out.group = k ? 256 : 32;
  out.q.resize(n);
  out.d.resize(n / out.group);
  out.sum16.resize(n / 16);
  for (int64_t g = 0; g < n / out.group; ++g) {
    const float* xg = x + g * out.group;
    int8_t* q = &out.q[g * out.group];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < out.group; ++j)
      if (std::fabs(xg[j]) > amax) {
        amax = std::fabs(xg[j]);
        max = xg[j];
      }
    if (k) {
      // Q8_K: the element of largest magnitude maps to -127 (its sign kept); the scale stays float.
      const float iscale = amax > 0 ? -127.0f / max : 0.0f;
      for (int j = 0; j < 256; ++j) q[j] = (int8_t)std::min(127.0f, std::nearbyint(iscale * xg[j]));
      out.d[g] = amax > 0 ? 1.0f / iscale : 0.0f;
    } else {
      // Q8_0: symmetric; the scale is stored as fp16.
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      for (int j = 0; j < 32; ++j) q[j] = (int8_t)std::nearbyint(xg[j] * id);
      out.d[g] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));
    }
  }
  out.minus128_sum4.resize(n / 4);
  for (int64_t c = 0; c < n / 4; ++c)
    out.minus128_sum4[c] = -128 * (out.q[c * 4] + out.q[c * 4 + 1] + out.q[c * 4 + 2] + out.q[c * 4 + 3]);
  for (int64_t s = 0; s < n / 16; ++s) {
    int32_t sum = 0;
    for (int j = 0; j < 16; ++j) sum += out.q[s * 16 + j];
    out.sum16[s] = sum;
  }
  out.sum32.resize(n / 32);
  for (int64_t s = 0; s < n / 32; ++s) out.sum32[s] = (int16_t)(out.sum16[2 * s] + out.sum16[2 * s + 1]);
}

void unpack_row(DType t, const void* row, int64_t n, UnpackedRow& out) {
  const DTypeTraits* tr = dtype_traits((uint32_t)t);
  if (!tr || !tr->unpack) throw Error(std::string("no integer kernel for tensor type ") + dtype_name(t));
  tr->unpack(static_cast<const uint8_t*>(row), n, out);
}

void unpack_q8_0(const uint8_t* p, int64_t n, UnpackedRow& out) {
  resize(out, 32, false, false, n);
  for (int64_t b = 0; b < n / 32; ++b, p += 34) {
    out.scale[b] = fp16_at(p);
    std::memcpy(&out.q[b * 32], p + 2, 32);
  }
}

void unpack_q4_0(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_32(p, n, 18, false, false, 8, out); }
void unpack_q4_1(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_32(p, n, 20, true, false, 0, out); }
void unpack_q5_0(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_32(p, n, 22, false, true, 16, out); }
void unpack_q5_1(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_32(p, n, 24, true, true, 0, out); }
void unpack_q4_k(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_k4(p, n, false, out); }
void unpack_q5_k(const uint8_t* p, int64_t n, UnpackedRow& out) { unpack_k4(p, n, true, out); }

// Q6_K: 16 sub-blocks of 16 with int8 scales; w = d*sc*(q - 32).
void unpack_q6_k(const uint8_t* p, int64_t n, UnpackedRow& out) {
  resize(out, 16, false, true, n);
  for (int64_t b = 0; b < n / 256; ++b, p += 210) {
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    out.d[b] = fp16_at(p + 208);
    for (int s = 0; s < 16; ++s) out.iscale[b * 16 + s] = sc[s];
    for (int half = 0; half < 2; ++half) {
      int8_t* q = &out.q[b * 256 + half * 128];
      const uint8_t* l0 = ql + half * 64;
      const uint8_t* h0 = qh + half * 32;
      for (int l = 0; l < 32; ++l) {
        q[l] = (int8_t)(((l0[l] & 0x0F) | ((h0[l] & 3) << 4)) - 32);
        q[l + 32] = (int8_t)(((l0[l + 32] & 0x0F) | (((h0[l] >> 2) & 3) << 4)) - 32);
        q[l + 64] = (int8_t)(((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4)) - 32);
        q[l + 96] = (int8_t)(((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
}


namespace {

// Exact int32 sum of the products of 32 signed bytes.
#if defined(__AVX2__)
inline __m256i products_32(__m256i w, __m256i x) {
  // The instructions multiply unsigned by signed bytes: move w's sign onto x.
  return add_products4(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));  // 8 int32 partial sums
}

// A Q8_0 block's 32 weights as signed bytes.   p: the block (fp16 scale, then the quants)
inline __m256i block_weights(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)); }

// How far ahead of use weight bytes are asked for: a thread's few weight streams alone do not keep
// enough DRAM reads in flight.
constexpr int kPrefetchBytes = 1024;

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Lane r: the sum of v[r]'s 8 lanes (exact integers, in a tree of horizontal adds).
inline __m256i sums_of_8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // a: [rows 0-3 of the low halves | rows 0-3 of the high halves], b the same for rows 4-7
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
#endif

// The 4- and 5-bit 32-element formats (ops/block32_layout.h), read in place. Per block each row's exact
// integer sum, then sum = fma(d_w * d_x, isum, sum) and, with an offset, sum = fma(m_w * d_x, sum(q_x), sum):
// for Q4_0 the order of llama.cpp's repacked Q4_0 kernels (its plain vec_dot adds lane by lane), which
// the packed rows (packed_rows.h) and the tiles (quant_tiles.h) take too.   out: [NR]
template <Block32Layout L>
inline int32_t block32_isum(const uint8_t* p, const int8_t* xq) {
#if defined(__AVX2__)
  return hsum_epi32(products_32(block32_weights<L>(p), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq))));
#else
  const uint8_t* qs = p + L.bytes - 16;
  uint32_t qh = 0;
  if constexpr (L.fifth) qh = fifth_bits_at<L>(p);
  int32_t isum = 0;
  for (int j = 0; j < 32; ++j) {
    const int q = (j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4) | (int)(((qh >> j) & 1) << 4);
    isum += (q - L.bias) * xq[j];
  }
  return isum;
#endif
}

template <Block32Layout L, int NR>
void dot_block32_rows(const uint8_t* const* rows, const QuantizedActs& x, int64_t n, float* out) {
  const int8_t* xq = x.q.data();
#if defined(__AVX2__)
  if constexpr (NR == 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; ++b) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
      __m256i v[8];
      alignas(32) float d[8], m[8];
      for (int r = 0; r < 8; ++r) {
        const uint8_t* p = rows[r] + b * L.bytes;
        if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
        v[r] = products_32(block32_weights<L>(p), xv);
        d[r] = fp16_at(p) * x.d[b];
        if constexpr (L.offset) m[r] = fp16_at(p + 2) * x.d[b];
      }
      acc = _mm256_fmadd_ps(_mm256_load_ps(d), _mm256_cvtepi32_ps(sums_of_8(v)), acc);
      if constexpr (L.offset) acc = _mm256_fmadd_ps(_mm256_load_ps(m), _mm256_set1_ps((float)x.sum32[b]), acc);
    }
    _mm256_storeu_ps(out, acc);
    return;
  }
#endif
  for (int r = 0; r < NR; ++r) {
    float sum = 0.0f;
    const uint8_t* p = rows[r];
    for (int64_t b = 0; b < n / 32; ++b, p += L.bytes) {
      sum = std::fma(fp16_at(p) * x.d[b], (float)block32_isum<L>(p, xq + b * 32), sum);
      if constexpr (L.offset) sum = std::fma(fp16_at(p + 2) * x.d[b], (float)x.sum32[b], sum);
    }
    out[r] = sum;
  }
}

// Q8_0: out[r] = row r . x for NR rows: each activation block is loaded once for all of them, and
// their sums are NR independent chains (one row alone waits on its FMA latency every block).
template <int NR>
void dot_blocks(const uint8_t* const* rows, const QuantizedActs& x, int64_t n, float* out) {
  const int bb = 34;
  const int8_t* xq = x.q.data();
#if defined(__AVX2__)
  __m256 acc[NR];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + b * bb;
      if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      const __m256 d = _mm256_set1_ps(fp16_at(p) * x.d[b]);
      acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(products_32(block_weights(p), xv)), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum_avx(acc[r]);
#else
  for (int r = 0; r < NR; ++r) {
    float sum = 0.0f;
    const uint8_t* p = rows[r];
    for (int64_t b = 0; b < n / 32; ++b, p += bb) {
      int32_t isum = 0;
      for (int j = 0; j < 32; ++j) isum += (int8_t)p[2 + j] * xq[b * 32 + j];
      sum += fp16_at(p) * x.d[b] * (float)isum;
    }
    out[r] = sum;
  }
#endif
}

#if defined(__AVX2__)
// NT tokens against NR rows: each weight block (and its signs) is loaded once for all the tokens; per
// token the steps of dot_blocks, so each result is bit-identical to it.   x: [NT]; out[t * ldo + r]
template <int NR, int NT>
void dot_blocks_tokens(const uint8_t* const* rows, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const int bb = 34;
  __m256 acc[NT][NR];
  for (auto& a : acc)
    for (auto& r : a) r = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256i xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t].q.data() + b * 32));
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + b * bb;
      if (b % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      const __m256i w = block_weights(p), magnitude = _mm256_sign_epi8(w, w);
      const float dw = fp16_at(p);
      for (int t = 0; t < NT; ++t) {
        const __m256i products = add_products4(_mm256_setzero_si256(), magnitude, _mm256_sign_epi8(xv[t], w));
        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[t].d[b]), _mm256_cvtepi32_ps(products), acc[t][r]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < NR; ++r) out[t * ldo + r] = hsum_avx(acc[t][r]);
}
#endif

#if defined(__AVX2__) && !FASA_KQUANT_512

// sc * (each sub-block's sum of q_w * q_x) for 32 unsigned weights (below 64) and 32 activations:
// 8 int32 lanes; lanes 0-3 are the first 16 elements', 4-7 the last 16's (scales: int16 per half).
inline __m256i scaled_products(__m256i w, const int8_t* x, __m256i scales) {
  const __m256i pairs = _mm256_maddubs_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm256_madd_epi16(pairs, scales);
}

// The K-quants' super-block sums of dot_super_blocks, in AVX2 integers: the same exact isum and msum,
// then the same float expression, so the result is bit-identical to unpack_row + dot_unpacked.
// NT tokens against one row: the weights and their scales are unpacked once per super-block for all
// of them.   x: [NT]; out[t * ldo] for t < NT
template <int NT>
void dot_k4_row(const uint8_t* p, const QuantizedActs* x, int64_t n, bool fifth_bit, float* out, int64_t ldo) {
  const int block_bytes = fifth_bit ? 176 : 144;
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  float sum[NT] = {};
  for (int64_t b = 0; b < n / 256; ++b, p += block_bytes) {
    const uint8_t* sc = p + 4;
    const uint8_t* qs = p + (fifth_bit ? 48 : 16);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    __m256i w[8], scale[8];  // sub-block s's 32 weights (below 32) and its scale in 16 int16 lanes
    int mins[8];
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles)
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
      w[2 * g] = _mm256_and_si256(raw, low4);
      w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if (fifth_bit) {
        w[2 * g] = _mm256_add_epi8(w[2 * g], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
        w[2 * g + 1] =
            _mm256_add_epi8(w[2 * g + 1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
      }
    }
    for (int s = 0; s < 8; ++s) {
      scale[s] = _mm256_set1_epi16((int16_t)(s < 4 ? sc[s] & 63 : (sc[s + 4] & 0x0F) | ((sc[s - 4] >> 6) << 4)));
      mins[s] = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const float d = fp16_at(p), dmin = fp16_at(p + 2);
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 256;
      const int32_t* s16 = x[t].sum16.data() + b * 16;
      __m256i isum = _mm256_setzero_si256();
      int32_t msum = 0;
      for (int s = 0; s < 8; ++s) {
        isum = _mm256_add_epi32(isum, scaled_products(w[s], xq + 32 * s, scale[s]));
        msum += mins[s] * (s16[2 * s] + s16[2 * s + 1]);
      }
      sum[t] = std::fma(d * x[t].d[b], (float)hsum_epi32(isum), sum[t]);
      sum[t] = std::fma(-(dmin * x[t].d[b]), (float)msum, sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * ldo] = sum[t];
}

template <int NT>
void dot_q6_k_row(const uint8_t* p, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
  float sum[NT] = {};
  for (int64_t b = 0; b < n / 256; ++b, p += 210) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    __m256i q[8], scale[8];  // elements 32k..32k+31, each + 32, and their two sub-blocks' scales
    for (int half = 0; half < 2; ++half) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * half));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * half + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * half));
      __m256i* qq = q + 4 * half;  // elements 0-31, 32-63, 64-95, 96-127 of the half
      qq[0] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_slli_epi16(_mm256_and_si256(h, low2), 4));
      qq[1] = _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), low2), 4));
      qq[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), low2), 4));
      qq[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), low2), 4));
    }
    for (int k = 0; k < 8; ++k)  // the two sub-blocks of 16 in q[k]
      scale[k] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
    const float d = fp16_at(p + 208);
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 256;
      int32_t offset = 0;  // sum_s sc[s] * sum(q_x): the quants are stored + 32
      for (int s = 0; s < 16; ++s) offset += sc[s] * x[t].sum16[b * 16 + s];
      __m256i isum = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) isum = _mm256_add_epi32(isum, scaled_products(q[k], xq + 32 * k, scale[k]));
      sum[t] = std::fma(d * x[t].d[b], (float)(hsum_epi32(isum) - 32 * offset), sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * ldo] = sum[t];
}
#endif

#if FASA_KQUANT_512
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (the unmasked forms' undefined source).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The K-quants' decode kernels with 512-bit VNNI, one row at a time (two rows side by side ran at half
// the speed from DRAM). Per super-block the same exact integer sums as the AVX2 dot_k4_row / dot_q6_k_row,
// reduced to one int32, then the same float expression: bit-identical results.
// Each 512-bit weight vector holds two sub-blocks' quants in the activations' order (a 32-byte load
// broadcast to both halves, each half shifted to its nibble), so the activations load contiguously.

// The super-block this far ahead is fetched while one is computed: the hardware prefetchers alone
// kept a K-quant matmul from DRAM 5-20 % slower (one-token and 8-token passes, 2 threads, Zen 4).
constexpr int kKquantPrefetchBytes = 2048;
inline void prefetch_block(const uint8_t* p, int bytes) {
  for (int at = 0; at < bytes; at += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + kKquantPrefetchBytes + at, _MM_HINT_T0);
}

// Each int32 lane's value (a scale in int16 range) in both of its int16 halves: vpdpwssd then applies it
// to vpmaddubsw's pair sums as it accumulates them (pairs of unsigned weights below 64 times int8
// activations reach 2 * 63 * 128: no saturation), fewer and faster steps than vpdpbusd and vpmulld.
inline __m512i in_int16_pairs(__m512i lanes) {
  return _mm512_or_si512(_mm512_and_si512(lanes, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(lanes, 16));
}

// 16 lanes of the 8 scales, as int16 pairs: lanes 0-7 take scale a, lanes 8-15 scale b.
inline __m512i lanes_of(__m512i scales, int a, int b) {
  return in_int16_pairs(_mm512_permutexvar_epi32(_mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a), scales));
}

// out[i] = the sum of v[i]'s 16 lanes for i < K (1, 2 or a multiple of 4): exact integer sums, so
// reducing several vectors together (each folded to 256 bits, then a tree of horizontal adds) gives
// the bits one reduction each would, at a fraction of the instructions.
template <int K>
inline void lane_sums(const __m512i* v, int32_t* out) {
  static_assert(K <= 2 || K % 4 == 0);
  if constexpr (K == 1) {
    out[0] = _mm512_reduce_add_epi32(v[0]);
    return;
  }
  if constexpr (K == 2) {
    const __m256i h0 = _mm256_add_epi32(_mm512_castsi512_si256(v[0]), _mm512_extracti64x4_epi64(v[0], 1));
    const __m256i h1 = _mm256_add_epi32(_mm512_castsi512_si256(v[1]), _mm512_extracti64x4_epi64(v[1], 1));
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(h0, h1), _mm256_setzero_si256());
    const __m128i r = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    out[0] = _mm_cvtsi128_si32(r), out[1] = _mm_extract_epi32(r, 1);
    return;
  }
  for (int q = 0; q < K; q += 4) {
    __m256i h[4];
    for (int i = 0; i < 4; ++i) h[i] = _mm256_add_epi32(_mm512_castsi512_si256(v[q + i]), _mm512_extracti64x4_epi64(v[q + i], 1));
    // per 128-bit half: [sum h0, sum h1, sum h2, sum h3] of that half's four lanes
    const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + q), _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
  }
}

// NT tokens against one row: the weights are unpacked once per super-block for all of them; the
// tokens' integer sums are reduced together, then each token's float steps are the one-token kernel's.
// x: [NT]; out[t * ldo] for t < NT
template <int NT>
void dot_k4_row(const uint8_t* row, const QuantizedActs* x, int64_t n, bool fifth_bit, float* out, int64_t ldo) {
  const int block_bytes = fifth_bit ? 176 : 144;
  const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  const __m512i nibble = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);  // shifts of the low half 0, of the high half 4
  float sum[NT] = {};
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = row + b * block_bytes;
    prefetch_block(p, block_bytes);
    uint32_t a, bb, c;
    std::memcpy(&a, p + 4, 4), std::memcpy(&bb, p + 8, 4), std::memcpy(&c, p + 12, 4);
    const uint64_t sc = (uint64_t)(a & 0x3f3f3f3f) |
                        (uint64_t)((c & 0x0f0f0f0f) | (((a >> 6) & 0x03030303) << 4)) << 32;
    const uint64_t mn = (uint64_t)(bb & 0x3f3f3f3f) |
                        (uint64_t)(((c >> 4) & 0x0f0f0f0f) | (((bb >> 6) & 0x03030303) << 4)) << 32;
    const __m512i scales = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
    const __m128i mn8 = _mm_cvtsi64_si128((long long)mn);
    const __m512i mins16 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(mn8, mn8));  // lanes 2s, 2s + 1: sub-block s's min
    const uint8_t* qs = p + (fifth_bit ? 48 : 16);
    const __m512i qh = fifth_bit ? _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)))
                                 : _mm512_setzero_si512();
    __m512i w[4], sc_lanes[4];  // sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles), and their scales
    for (int g = 0; g < 4; ++g) {
      const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g)));
      w[g] = _mm512_and_si512(_mm512_srlv_epi64(raw, nibble), low4);
      if (fifth_bit) {
        const __m512i bit = _mm512_set_epi64(2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g, 2 * g, 2 * g, 2 * g);
        w[g] = _mm512_or_si512(w[g], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, bit), one), 4));
      }
      sc_lanes[g] = lanes_of(scales, 2 * g, 2 * g + 1);
    }
    __m512i v[2 * NT];  // token t: 2t the scaled products, 2t + 1 the activations' sums per 16 times their min
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 256;
      __m512i isum = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(w[g], _mm512_loadu_si512(xq + 64 * g)), sc_lanes[g]);
      v[2 * t] = isum;
      v[2 * t + 1] = _mm512_mullo_epi32(mins16, _mm512_loadu_si512(&x[t].sum16[b * 16]));
    }
    int32_t sums[2 * NT];
    lane_sums<2 * NT>(v, sums);
    const float d = fp16_at(p), dmin = fp16_at(p + 2);
    for (int t = 0; t < NT; ++t) {
      sum[t] = std::fma(d * x[t].d[b], (float)sums[2 * t], sum[t]);
      sum[t] = std::fma(-(dmin * x[t].d[b]), (float)sums[2 * t + 1], sum[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * ldo] = sum[t];
}

template <int NT>
void dot_q6_k_row(const uint8_t* row, const QuantizedActs* x, int64_t n, float* out, int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(3);
  const __m512i shift_lo = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), shift_hi = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
  float sum[NT] = {};
  for (int64_t b = 0; b < n / 256; ++b) {
    const uint8_t* p = row + b * 210;
    prefetch_block(p, 210);
    const __m512i scales = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
    __m512i w[4];  // elements 0-63, 64-127 of each half, each + 32
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(p + 64 * half);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * half)));
      w[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_lo), low2), 4));
      w[2 * half + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                        _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_hi), low2), 4));
    }
    __m512i sc16[4];  // lanes 4j..4j+3 (both int16 halves): sub-block 4k + j's scale
    for (int k = 0; k < 4; ++k) {
      const int s0 = 4 * k;
      const __m512i idx = _mm512_set_epi32(s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 2, s0 + 2, s0 + 2, s0 + 2,
                                           s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0, s0, s0, s0);
      sc16[k] = in_int16_pairs(_mm512_permutexvar_epi32(idx, scales));
    }
    // the quants are stored + 32: each token starts from -32 * sum_s sc[s] * sum(q_x over s)
    const __m512i offset_scales = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(scales, 5));
    __m512i v[NT];  // token t's scaled products
    for (int t = 0; t < NT; ++t) {
      const int8_t* xq = x[t].q.data() + b * 256;
      v[t] = _mm512_mullo_epi32(offset_scales, _mm512_loadu_si512(&x[t].sum16[b * 16]));
      for (int k = 0; k < 4; ++k)  // w[k] holds sub-blocks 4k..4k+3 (16 elements each)
        v[t] = _mm512_dpwssd_epi32(v[t], _mm512_maddubs_epi16(w[k], _mm512_loadu_si512(xq + 64 * k)), sc16[k]);
    }
    int32_t sums[NT];
    lane_sums<NT>(v, sums);
    const float d = fp16_at(p + 208);
    for (int t = 0; t < NT; ++t) sum[t] = std::fma(d * x[t].d[b], (float)sums[t], sum[t]);
  }
  for (int t = 0; t < NT; ++t) out[t * ldo] = sum[t];
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#if defined(__AVX2__)
// Every token against one K-quant row, 8, 4, 2 or 1 at a time (each pass reads the row from cache).
template <bool Q6>
void dot_k_row_tokens(const uint8_t* row, const QuantizedActs* x, int n_tokens, int64_t n, bool fifth_bit,
                         float* out, int64_t ldo) {
#if FASA_KQUANT_512
  constexpr int kMost = 8;
#else
  constexpr int kMost = 4;
#endif
  in_token_passes<kMost>(n_tokens, [&]<int NT>(int t) {
    if constexpr (Q6) dot_q6_k_row<NT>(row, x + t, n, out + t * ldo, ldo);
    else dot_k4_row<NT>(row, x + t, n, fifth_bit, out + t * ldo, ldo);
  });
}
#endif

// out[tk * ldo + r] = row r . x[tk] for NR rows of type T and n_tokens tokens; each row comes from memory
// once (the later tokens find it in cache).
template <DType T, int NR>
void dot_direct_n(const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* out, int64_t ldo) {
  const auto* p = reinterpret_cast<const uint8_t* const*>(rows);
  if constexpr (block32_layout(T) != nullptr) {  // (Q4_0, several tokens: the packed rows' path)
    for (int tk = 0; tk < n_tokens; ++tk) dot_block32_rows<*block32_layout(T), NR>(p, x[tk], n, out + tk * ldo);
  } else if constexpr (T == DType::Q8_0) {
    int tk = 0;
#if defined(__AVX2__)
    if constexpr (NR % 4 == 0)  // pairs of tokens against 4 rows at a time: 8 accumulators
      for (; tk + 2 <= n_tokens; tk += 2)
        for (int r = 0; r < NR; r += 4) dot_blocks_tokens<4, 2>(p + r, x + tk, n, out + tk * ldo + r, ldo);
#endif
    for (; tk < n_tokens; ++tk) dot_blocks<NR>(p, x[tk], n, out + tk * ldo);
  } else {
#if defined(__AVX2__)  // the K-quants (their rows below are null without AVX2)
    for (int r = 0; r < NR; ++r)
      dot_k_row_tokens<T == DType::Q6_K>(p[r], x, n_tokens, n, T == DType::Q5_K, out + r, ldo);
#endif
  }
}

template <DType T>
constexpr DirectDotKernels direct_kernels() {
  return {&dot_direct_n<T, 1>, &dot_direct_n<T, kDirectRows>};
}

const DirectDotKernels& direct_of(DType t) {
  const DirectDotKernels* k = dtype_traits(t).direct;
  if (!k || !k->one) throw Error(std::string("no direct kernel for tensor type ") + dtype_name(t));
  return *k;
}

}  // namespace

constinit const DirectDotKernels kDirectQ8_0 = direct_kernels<DType::Q8_0>(), kDirectQ4_0 = direct_kernels<DType::Q4_0>(),
                       kDirectQ4_1 = direct_kernels<DType::Q4_1>(), kDirectQ5_0 = direct_kernels<DType::Q5_0>(),
                       kDirectQ5_1 = direct_kernels<DType::Q5_1>();
#if defined(__AVX2__)
constinit const DirectDotKernels kDirectQ4_K = direct_kernels<DType::Q4_K>(), kDirectQ5_K = direct_kernels<DType::Q5_K>(),
                       kDirectQ6_K = direct_kernels<DType::Q6_K>();
#else
constinit const DirectDotKernels kDirectQ4_K{}, kDirectQ5_K{}, kDirectQ6_K{};
#endif

bool has_direct_dot(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr && tr->direct && tr->direct->one;
}

float dot_direct(DType t, const void* row, const QuantizedActs& x, int64_t n) {
  float out;
  direct_of(t).one(&row, &x, 1, n, &out, 1);
  return out;
}

void dot_direct_rows(DType t, const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                     int64_t ldo) {
  direct_of(t).rows(rows, x, n_tokens, n, out, ldo);
}

float dot_unpacked(const UnpackedRow& w, const QuantizedActs& x) {
  if (!w.k_quant) return dot_blocks_of_32(w, x);
  return w.sub == 16 ? dot_super_blocks<16>(w, x) : dot_super_blocks<32>(w, x);
}

}  // namespace fasa
