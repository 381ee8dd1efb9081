#pragma once
// Small per-token ops of the forward pass.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "ops/rope_layout.h"

namespace fasa {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (x, w, out: [n])
void rms_norm(const float* x, const float* w, int n, float eps, float* out);

// Rotates each head of `x` ([n_heads, head_dim]) in place at position `pos`.
// cos_sin: [n_rot/2, 2] for this position (see rope_cos_sin); dims past n_rot stay as they are.
void rope(float* x, int n_heads, int head_dim, int n_rot, RopeLayout layout, const float* cos_sin);

// cos_sin[i] = {cos(pos * inv_freq[i]), sin(pos * inv_freq[i])}   (inv_freq: [n_planes])
void rope_cos_sin(const float* inv_freq, int n_planes, int64_t pos, float* cos_sin);

// gate[i] = silu(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int64_t n);

// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form (Gemma's GeGLU)
void geglu(float* gate, const float* up, int64_t n);

// e^x to about 2e-7 relative error for x in [-87, 88] (clamped outside; e^-87 is below any softmax
// weight that matters). Branch-free, so a `#pragma omp simd` loop of it vectorises (given
// -fno-trapping-math, CMakeLists.txt: GCC keeps the clamps scalar without it), which std::exp does not
// without -ffast-math: softmax over long rows spends most of its time here.
inline float exp_fast(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (x * 1.44269504f + kRound) - kRound;  // x = n ln2 + r, |r| <= ln2 / 2
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln2 split in two for exactness
  float p = 1.0f / 5040;  // Taylor series of e^r to r^7
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n; n is already in [-126, 127] but for a NaN x, which this clamp (operands in this order) turns
  // into 127, so the conversion stays defined and p, NaN, makes the result NaN.
  const int32_t bits = ((int32_t)std::max(-126.0f, std::min(127.0f, n)) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// In-place softmax over x[0..n).
void softmax(float* x, int64_t n);

}  // namespace fasa
