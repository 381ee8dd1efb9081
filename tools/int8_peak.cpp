// The ceiling of exact int8 products on this core with AVX2 (no VNNI): how many multiply-adds per second
// the instruction chain a Q8_0 x Q8_0 matmul needs can issue when nothing else limits it (operands from
// L1, 8 independent sums), beside float FMA. It leaves out what both engines add (llama.cpp a second
// vpsignb per 32 products, each a per-block scale product), so it is an upper bound. A prefill's speed divided by this (times its MACs per
// token) is the share of the ceiling it reaches; docs/PERFORMANCE.md uses it to bound pp512 on AVX2.
//   ./build/fasa_int8_peak        (best of 2000 short trials, so another process's time slices drop out)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace {

constexpr int kChains = 8;
// Operands from memory, so the compiler cannot fold the products: weights w, their magnitudes |w| (a
// matmul takes them once per weight chunk for all its tokens), activations x.
__m256i g_w[kChains], g_m[kChains], g_x[kChains];

// 32 products of |w| by x with w's sign, summed to 8 int32 lanes (the AVX2 Q8_0 step, |w| taken once).
inline __m256i products32(__m256i w, __m256i magnitude, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

// As both engines accumulate: each 32 products converted to float and added times the block's scale.
__attribute__((noinline)) float float_per_chunk(int64_t iters) {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 d = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it) {
    const __m256i *w = g_w, *m = g_m, *x = g_x;
    __asm__ volatile("" : "+r"(w), "+r"(m), "+r"(x));  // load the operands each time, as a kernel streams them
#pragma GCC unroll 8
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(products32(w[i], m[i], x[i])), acc[i]);
  }
  __m256 t = acc[0];
  for (int i = 1; i < kChains; ++i) t = _mm256_add_ps(t, acc[i]);
  return _mm256_cvtss_f32(t);
}

// A cheaper order: 8 chunks of 32 summed in int32 (two sums, so two conversions per 256 products);
// exact only where the 8 chunks share a scale, which Q8_0's blocks of 32 do not.
__attribute__((noinline)) float int_per_block(int64_t iters) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256 d = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it) {
    const __m256i *w = g_w, *m = g_m, *x = g_x;
    __asm__ volatile("" : "+r"(w), "+r"(m), "+r"(x));
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
    for (int i = 0; i < kChains; ++i) s[i & 1] = _mm256_add_epi32(s[i & 1], products32(w[i], m[i], x[i]));
    for (int j = 0; j < 2; ++j) acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s[j]), acc[j]);
  }
  return _mm256_cvtss_f32(_mm256_add_ps(acc[0], acc[1]));
}

__attribute__((noinline)) float float_fma(int64_t iters) {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 a = _mm256_set1_ps(1.0001f), b = _mm256_set1_ps(0.999f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 8
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
    __asm__ volatile("" : "+x"(a), "+x"(b));
  }
  __m256 t = acc[0];
  for (int i = 1; i < kChains; ++i) t = _mm256_add_ps(t, acc[i]);
  return _mm256_cvtss_f32(t);
}

// Multiply-adds per nanosecond in the fastest of many short trials.
double best_gmacs(float (*kernel)(int64_t), double macs_per_iter) {
  constexpr int64_t kIters = 20000;
  double best = 0;
  volatile float sink = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + kernel(kIters);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::max(best, macs_per_iter * kIters / std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  for (int i = 0; i < kChains; ++i) {
    g_w[i] = _mm256_set1_epi8((char)(17 + i));
    g_m[i] = _mm256_sign_epi8(g_w[i], g_w[i]);
    g_x[i] = _mm256_set1_epi8((char)(-5 - i));
  }
  std::printf("int8 products, float sum per 32 (Q8_0 as llama.cpp and fasa):  %5.1f GMAC/s per core\n",
              best_gmacs(float_per_chunk, kChains * 32));
  std::printf("int8 products, int32 sum per block of 256:                     %5.1f GMAC/s per core\n",
              best_gmacs(int_per_block, kChains * 32));
  std::printf("float FMA:                                                     %5.1f GMAC/s per core\n",
              best_gmacs(float_fma, kChains * 8));
}
#else
int main() {
  std::puts("fasa_int8_peak measures AVX2 + FMA chains; this build does not target both");
  return 1;
}
#endif
