#version 450
// FASA's K_dom plane: each token's key ([tokens, heads * head_dim] floats; tokens in y) at its position, only the dims the
// plane holds (dims[g][j]: a model dim, or -1 for a slot a KV head with fewer dims leaves empty), as
// F16 rows of [heads, n_ctx, n_dom]. TIP reads only this plane. Bindings: 0 k, 1 step, 2 dims, 3 plane.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "half_rte.glsl"
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer Dims { int dims[]; };
layout(std430, binding = 3) writeonly buffer Plane { float16_t plane[]; };
layout(push_constant) uniform Push { uint heads, head_dim, n_dom, n_ctx; } p;

void main() {
  const uint id = gl_GlobalInvocationID.x;
  if (id >= p.heads * p.n_dom) return;
  const uint g = id / p.n_dom, j = id % p.n_dom;
  const int d = dims[id];
  plane[(g * p.n_ctx + uint(STEP.pos)) * p.n_dom + j] = float16_t(d < 0 ? 0.0 : round_to_half(k[(gl_WorkGroupID.y * p.heads + g) * p.head_dim + uint(d)]));
}
