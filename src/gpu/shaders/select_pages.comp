#version 450
// Quest's rows for one query head: every row while the budget covers the cache; else the newest
// token's page (its newest rows where the budget is less than a page), then whole pages, best bound
// first (radix_select.glsl; in page order), while the budget holds. One workgroup per query head. Bindings:
// 0 scores ([heads, n_ctx]: per page), 1 step, 2 rows ([heads, n_ctx]), 3 counts ([heads]).
#extension GL_GOOGLE_include_directive : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Scores { float scores[]; };
layout(std430, binding = 2) writeonly buffer Rows { uint rows[]; };
layout(std430, binding = 3) writeonly buffer Counts { uint counts[]; };
layout(push_constant) uniform Push { uint n_ctx, page; } p;

#define SCORE(i) scores[base + (i)]
#define EMIT(pg, slot) \
  for (uint r = 0u; r < p.page; ++r) rows[base + kept + (slot) * p.page + r] = (pg) * p.page + r
uint base, kept;
#include "radix_select.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x;
  base = h * p.n_ctx;
  const uint n = uint(STEP.pos) + 1u, budget = uint(STEP.budget), P = p.page;
  if (budget >= n) {  // dense: every row
    for (uint t = tid; t < n; t += 64u) rows[base + t] = t;
    if (tid == 0u) counts[h] = n;
    return;
  }
  const uint last = (n - 1u) / P, newest = max(last * P, n - budget);
  kept = n - newest;
  for (uint t = tid; t < kept; t += 64u) rows[base + t] = newest + t;
  const uint more = min(last, (budget - kept) / P);
  uint ties;
  const uint threshold = radix_threshold(0u, last, more, ties);
  if (more > 0u) gather_top(0u, last, threshold, ties);
  if (tid == 0u) counts[h] = kept + more * P;
}
