#version 450
// y[r] (+)= W[r, :] . x for every row r of W: one workgroup per row, its 64 threads over the columns.
// Q8_0 rows go a block at a time (scale once per 32 products). Bindings: 0 W, 1 x, 2 y.
#extension GL_GOOGLE_include_directive : require
#include "weights.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Push {
  uint rows, cols;
  uint accumulate;  // 1: y += W x (the residual stream); 0: y = W x
} p;

shared float partial[64];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
    float acc = 0.0;
#if defined(WEIGHT_Q8_0)
    const uint blocks = p.cols / 32u;
    for (uint b = tid; b < blocks; b += 64u) {
      const uint block = r * blocks + b;
      float s = 0.0;
      for (uint j = 0u; j < 32u; ++j) s += block_value(block, j) * x[b * 32u + j];
      acc += block_scale(block) * s;
    }
#else
    for (uint i = tid; i < p.cols; i += 64u) acc += weight(r, p.cols, i) * x[i];
#endif
    partial[tid] = acc;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    if (tid == 0u) y[r] = p.accumulate != 0u ? y[r] + partial[0] : partial[0];
    barrier();
  }
}
