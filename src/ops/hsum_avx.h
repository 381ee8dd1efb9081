#pragma once
// The sum of a __m256's eight floats, for the AVX kernels that keep vector accumulators.
#if defined(__AVX__)
#include <immintrin.h>

namespace fasa {

inline float hsum_avx(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace fasa
#endif
