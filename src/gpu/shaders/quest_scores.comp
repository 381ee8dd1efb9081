#version 450
// Quest's bound on each complete page's scores for a query head: sum over dims of
// max(q_d min_d, q_d max_d), for the pages before the newest token's. One workgroup per query head.
// Bindings: 0 q, 1 step, 2 bounds ([heads_kv, n_pages, 2, head_dim]), 3 scores ([heads, n_ctx]).
#extension GL_GOOGLE_include_directive : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 2) readonly buffer Bounds { float bounds[]; };
layout(std430, binding = 3) writeonly buffer Scores { float scores[]; };
layout(push_constant) uniform Push { uint head_dim, n_pages, n_ctx, group, page; } p;

void main() {
  const uint h = gl_WorkGroupID.x, g = h / p.group, D = p.head_dim, last = uint(STEP.pos) / p.page;
  for (uint pg = gl_LocalInvocationID.x; pg < last; pg += 64u) {
    const uint at = (g * p.n_pages + pg) * 2u * D;
    float s = 0.0;
    for (uint d = 0u; d < D; ++d) {
      const float qd = q[h * D + d];
      s += max(qd * bounds[at + d], qd * bounds[at + D + d]);
    }
    scores[h * p.n_ctx + pg] = s;
  }
}
