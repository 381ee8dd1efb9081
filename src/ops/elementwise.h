#pragma once
// Small per-token ops of the forward pass.
#include <cstdint>

#include "model/config.h"

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

// In-place softmax over x[0..n).
void softmax(float* x, int64_t n);

}  // namespace fasa
