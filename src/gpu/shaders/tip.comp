#version 450
// TIP: each query head's partial scores on its dominant chunks, S_t = q_dom . k_dom_t, for the rows
// sink..pos-recent of its KV head's K_dom plane (forced_rows at the step's budget). q_dom[j] = q[dims[g][j]] where the head scores on
// slot j (mask[h][j] = 1), else 0. `split` workgroups per head share its rows. Bindings: 0 q, 1 step,
// 2 plane ([heads_kv, n_ctx, n_dom] F16), 3 dims ([heads_kv, n_dom]), 4 mask ([heads, n_dom]),
// 5 scores ([heads, n_ctx]).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 2) readonly buffer Plane { float16_t plane[]; };
layout(std430, binding = 3) readonly buffer Dims { int dims[]; };
layout(std430, binding = 4) readonly buffer Mask { float mask[]; };
layout(std430, binding = 5) writeonly buffer Scores { float scores[]; };
layout(push_constant) uniform Push { uint head_dim, n_dom, n_ctx, group, sink, recent, split; } p;

shared float q_dom[256];  // n_dom <= head_dim <= 256

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x / p.split, part = gl_WorkGroupID.x % p.split;
  const uint g = h / p.group, nd = p.n_dom;
  for (uint j = tid; j < nd; j += 64u) {
    const int d = dims[g * nd + j];
    q_dom[j] = d < 0 ? 0.0 : mask[h * nd + j] * q[h * p.head_dim + uint(d)];
  }
  barrier();
  // (where the budget covers the cache, select_rows takes every row and these scores go unread)
  const uvec2 forced = forced_rows(p.sink, p.recent, uint(STEP.budget));
  const uint n = uint(STEP.pos) + 1u, lo = min(forced.x, n), hi = max(lo, n - min(forced.y, n));
  for (uint t = lo + part * 64u + tid; t < hi; t += p.split * 64u) {
    float s = 0.0;
    const uint row = (g * p.n_ctx + t) * nd;
    for (uint j = 0u; j < nd; ++j) s += q_dom[j] * float(plane[row + j]);
    scores[h * p.n_ctx + t] = s;
  }
}
