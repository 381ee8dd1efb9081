#include "ops/kv_rows.h"

#if defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define FASA_KV_F16C 1
#endif

#include "fasa/error.h"

namespace fasa {

namespace {
#if FASA_KV_F16C
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif
}  // namespace

float kv_dot(const float* q, const void* row, DType t, int n) {
  if (t != DType::F16) return dot_f32(q, static_cast<const float*>(row), n);
  const uint16_t* h = static_cast<const uint16_t*>(row);
  int i = 0;
  float sum = 0.0f;
#if FASA_KV_F16C
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();  // two chains hide the FMA latency
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(h + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load_f16x8(h + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16x8(h + i), a0);
  sum = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) sum += q[i] * fp16_to_fp32(h[i]);
  return sum;
}

void kv_add_scaled(float* out, float w, const void* row, DType t, int n) {
  int i = 0;
  if (t == DType::F16) {
    const uint16_t* h = static_cast<const uint16_t*>(row);
#if FASA_KV_F16C
    const __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load_f16x8(h + i), _mm256_loadu_ps(out + i)));
#endif
    for (; i < n; ++i) out[i] += w * fp16_to_fp32(h[i]);
    return;
  }
  const float* f = static_cast<const float*>(row);
#pragma omp simd
  for (int j = 0; j < n; ++j) out[j] += w * f[j];
}

void kv_store(const float* x, DType t, int n, void* row) {
  if (t != DType::F16) {
    std::memcpy(row, x, (size_t)n * sizeof(float));
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(row);
  for (int i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);  // once per token: no need for speed
}

void kv_load(const void* row, DType t, int n, float* out) { dequantize_row(t, row, out, n); }

DType kv_type_from_name(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "f32") return DType::F32;
  throw Error("unknown KV cache type '" + name + "' (use f16 or f32)");
}

}  // namespace fasa
