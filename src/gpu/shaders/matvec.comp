#version 450
// y[t, r] (+)= W[r, :] . x[t, :] for every row r of W and token t: one workgroup per row (x) and
// per TILE tokens (y), its 64 threads over the columns, each weight read once for the tile's tokens.
// Q8_0 rows go a block at a time (scale once per 32 products). Bindings: 0 W, 1 x ([tokens, cols]),
// 2 y ([tokens, rows]).
#extension GL_GOOGLE_include_directive : require
#include "weights.glsl"

#define TILE 8  // = kMatvecTile in vulkan_session.cpp
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Push {
  uint rows, cols;
  uint accumulate;  // 1: y += W x (the residual stream); 0: y = W x
  uint tokens;
} p;

shared float partial[TILE * 64];

void main() {
  const uint tid = gl_LocalInvocationID.x, t0 = gl_WorkGroupID.y * TILE, nt = min(TILE, p.tokens - t0);
  for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
    float acc[TILE];
    for (uint j = 0u; j < TILE; ++j) acc[j] = 0.0;
#if defined(WEIGHT_Q8_0)
    const uint blocks = p.cols / 32u;
    for (uint b = tid; b < blocks; b += 64u) {
      const uint block = r * blocks + b;
      float s[TILE];
      for (uint j = 0u; j < TILE; ++j) s[j] = 0.0;
      for (uint i = 0u; i < 32u; ++i) {
        const float v = block_value(block, i);
        for (uint j = 0u; j < nt; ++j) s[j] += v * x[(t0 + j) * p.cols + b * 32u + i];
      }
      const float scale = block_scale(block);
      for (uint j = 0u; j < nt; ++j) acc[j] += scale * s[j];
    }
#else
    for (uint i = tid; i < p.cols; i += 64u) {
      const float v = weight(r, p.cols, i);
      for (uint j = 0u; j < nt; ++j) acc[j] += v * x[(t0 + j) * p.cols + i];
    }
#endif
    for (uint j = 0u; j < nt; ++j) partial[j * 64u + tid] = acc[j];
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s)
        for (uint j = 0u; j < nt; ++j) partial[j * 64u + tid] += partial[j * 64u + tid + s];
      barrier();
    }
    if (tid < nt) {
      const uint at = (t0 + tid) * p.rows + r;
      y[at] = p.accumulate != 0u ? y[at] + partial[tid * 64u] : partial[tid * 64u];
    }
    barrier();
  }
}
