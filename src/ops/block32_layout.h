#pragma once
// The 4- and 5-bit 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1) as one description, shared by the decode
// kernels (quant_dot.cpp) and the prefill tiles (quant_tiles.cpp), which must read them alike: per block
// fp16 d, [fp16 m], [32 fifth bits], 16 bytes of nibbles (elements 0-15 low, 16-31 high);
// w = d * (q - bias) (+ m).
#include <cstdint>
#include <cstring>

#include "ops/dtype.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fasa {

struct Block32Layout {
  int bytes;    // per block of 32
  bool offset;  // an fp16 m after d
  bool fifth;   // a 32-bit word of fifth bits before the nibbles
  int bias;     // subtracted from q
};
constexpr Block32Layout kQ4_0Layout{18, false, false, 8}, kQ4_1Layout{20, true, false, 0},
    kQ5_0Layout{22, false, true, 16}, kQ5_1Layout{24, true, true, 0};

// t's layout, or null where t is not one of these formats: the kernels' one table of them.
constexpr const Block32Layout* block32_layout(DType t) {
  switch (t) {
    case DType::Q4_0: return &kQ4_0Layout;
    case DType::Q4_1: return &kQ4_1Layout;
    case DType::Q5_0: return &kQ5_0Layout;
    case DType::Q5_1: return &kQ5_1Layout;
    default: return nullptr;
  }
}

template <Block32Layout L>
inline uint32_t fifth_bits_at(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p + L.bytes - 20, 4);
  return qh;
}

#if defined(__AVX2__)
// Bit j of qh as 0x10 in byte j.
inline __m256i fifth_bit_bytes(uint32_t qh) {
  const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);  // byte j: byte j / 8 of qh
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

// A block's 32 quants q as unsigned bytes (0..15 or 0..31), in element order.
template <Block32Layout L>
inline __m256i block32_quants(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + L.bytes - 16));
  const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
  const __m256i q = _mm256_set_m128i(hi, lo);
  if constexpr (L.fifth) return _mm256_or_si256(q, fifth_bit_bytes(fifth_bits_at<L>(p)));
  return q;
}

// A block's 32 weights q - bias as bytes (Q4_0 -8..7, Q4_1 0..15, Q5_0 -16..15, Q5_1 0..31).
template <Block32Layout L>
inline __m256i block32_weights(const uint8_t* p) {
  const __m256i q = block32_quants<L>(p);
  if constexpr (L.bias != 0) return _mm256_sub_epi8(q, _mm256_set1_epi8((char)L.bias));
  return q;
}
#endif

}  // namespace fasa
