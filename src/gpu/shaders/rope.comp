#version 450
// Rotates each head's RoPE planes in place: plane i pairs dims (2i, 2i+1) (normal layout) or
// (i, i + n_rot/2) (neox), by each token's cos/sin. One invocation per (head, plane) in x, the pass's tokens in y.
// Bindings: 0 x ([tokens, heads, head_dim]), 1 step.
#extension GL_GOOGLE_include_directive : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform Push { uint heads, head_dim, n_rot, neox; } p;

void main() {
  const uint half_rot = p.n_rot / 2u, id = gl_GlobalInvocationID.x;
  if (id >= p.heads * half_rot) return;
  const uint h = id / half_rot, i = id % half_rot;
  const uint t = gl_WorkGroupID.y, cs = t * p.n_rot;
  const uint a = (t * p.heads + h) * p.head_dim + (p.neox != 0u ? i : 2u * i), b = a + (p.neox != 0u ? half_rot : 1u);
  const float c = step_cos_sin[cs + 2u * i], s = step_cos_sin[cs + 2u * i + 1u];
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}
