#pragma once
// The packed layouts' block sizes (ops/packed_rows.h describes their bytes) and a prefetch, shared by the packing and
// AVX-512 kernels (packed_rows.cpp) and the AVX2 kernels (packed_rows_avx2.cpp).
#include <cstddef>
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "ops/dtype.h"
#include "ops/quant_dot.h"

namespace fasa {

constexpr size_t kPackedQ8Bytes = 16 + 8 * 32;  // Q8_0 block of 32 columns: 8 fp16 scales + 8 chunks x 8 rows x 4
constexpr size_t kPackedK4Bytes = 16 + 16 + 64 + 64 + 1024;  // Q4_K super-block: d, dmin, scales, mins, quants
constexpr size_t kPackedQ6Bytes = 16 + 128 + 1024 + 512;     // Q6_K super-block: d, scales, low nibbles, high bits
constexpr size_t kPackedQ4Bytes = 16 + 128;                  // Q4_0 block: the rows' fp16 d, then 2 lines of quants

#if defined(__AVX2__)
// Asks for the cache lines of n bytes at p (rows a kernel reads a few blocks later).
inline void prefetch_lines(const uint8_t* p, size_t n) {
  for (size_t line = 0; line < n; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + line, _MM_HINT_T0);
}
#endif

// Q4_K, Q6_K or Q4_0: one packed group against n_tokens tokens with AVX2 alone (no VNNI), bit-identical
// to dot_direct_rows.   x: [n_tokens]; out[t * ldo + r] for r < kDirectRows
template <DType T>
void dot_packed_nibbles_avx2(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                             int64_t ldo);
// Q8_0 the same way (its packed bytes q + 128 read back as signed).
void dot_packed_q8_0_avx2(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                          int64_t ldo);

}  // namespace fasa
