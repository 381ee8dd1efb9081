#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>

namespace fasa {

void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / (float)n + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void rope_cos_sin(const float* inv_freq, int n_planes, int64_t pos, float* cos_sin) {
  for (int i = 0; i < n_planes; ++i) {
    const float angle = (float)pos * inv_freq[i];  // float32 product, as the reference computes it
    cos_sin[2 * i] = (float)std::cos((double)angle);
    cos_sin[2 * i + 1] = (float)std::sin((double)angle);
  }
}

void rope(float* x, int n_heads, int head_dim, int n_rot, RopeLayout layout, const float* cos_sin) {
  const int half = n_rot / 2;
  // Plane i pairs dims (a, b): (2i, 2i+1) in the NORMAL layout, (i, i + n_rot/2) in NEOX.
  const int stride_a = layout == RopeLayout::Normal ? 2 : 1;
  const int offset_b = layout == RopeLayout::Normal ? 1 : half;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + (int64_t)h * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = i * stride_a, b = a + offset_b;
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void swiglu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void geglu(float* gate, const float* up, int64_t n) {
  // 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): one exp_fast, which
  // vectorises (tanhf does not).
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i], u = 0.7978845608f * x * (1.0f + 0.044715f * x * x);
    gate[i] = x / (1.0f + exp_fast(-2.0f * u)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float m = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace fasa
