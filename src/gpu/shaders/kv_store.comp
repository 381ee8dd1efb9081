#version 450
// Writes each token's key and value ([tokens, heads * head_dim] floats each) as F16 rows at its
// position of one layer's caches ([heads, n_ctx, head_dim] each). Tokens in y. Bindings: 0 k, 1 step,
// 2 v, 3 K cache, 4 V cache.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "half_rte.glsl"
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer KCache { float16_t k_cache[]; };
layout(std430, binding = 4) writeonly buffer VCache { float16_t v_cache[]; };
layout(push_constant) uniform Push { uint heads, head_dim, n_ctx; } p;

void main() {
  const uint id = gl_GlobalInvocationID.x;
  if (id >= p.heads * p.head_dim) return;
  const uint h = id / p.head_dim, d = id % p.head_dim;
  const uint at = (h * p.n_ctx + uint(STEP.pos)) * p.head_dim + d;
  const uint from = gl_WorkGroupID.y * p.heads * p.head_dim + id;
  k_cache[at] = float16_t(round_to_half(k[from]));
  v_cache[at] = float16_t(round_to_half(v[from]));
}
