#version 450
// Quest's page summaries: the step's key ([heads * head_dim] floats, rounded to F16 as the cache holds
// it) folded into the per-dim minimum and maximum of its page of `page` positions, started afresh at a
// page's first position. Bindings: 0 k, 1 step, 2 bounds ([heads, n_pages, 2, head_dim]: min, max).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 2) buffer Bounds { float bounds[]; };
layout(push_constant) uniform Push { uint heads, head_dim, n_pages, page; } p;

void main() {
  const uint id = gl_GlobalInvocationID.x;
  if (id >= p.heads * p.head_dim) return;
  const uint g = id / p.head_dim, d = id % p.head_dim, pos = uint(step_pos);
  const uint at = ((g * p.n_pages + pos / p.page) * 2u) * p.head_dim + d;
  const float v = float(float16_t(k[id]));
  const bool first = pos % p.page == 0u;
  bounds[at] = first ? v : min(bounds[at], v);
  bounds[at + p.head_dim] = first ? v : max(bounds[at + p.head_dim], v);
}
