#version 450
// FASA's rows for one query head: every row while the budget covers the cache (pos + 1 rows);
// else the sink rows, the recent rows (forced_rows: at most half the budget), and TIP's top
// (budget - sink - recent) of the rows between,
// found by a radix select on the scores (radix_select.glsl), these in row order. One workgroup
// per query head. Bindings: 0 scores ([heads, n_ctx]), 1 step, 2 rows ([heads, n_ctx]), 3 counts ([heads]).
#extension GL_GOOGLE_include_directive : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Scores { float scores[]; };
layout(std430, binding = 2) writeonly buffer Rows { uint rows[]; };
layout(std430, binding = 3) writeonly buffer Counts { uint counts[]; };
layout(push_constant) uniform Push { uint n_ctx, sink, recent; } p;

#define SCORE(i) scores[base + (i)]
#define EMIT(i, slot) rows[base + first + (slot)] = (i)
uint base, first;
#include "radix_select.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x;
  base = h * p.n_ctx;
  const uint n = uint(STEP.pos) + 1u, budget = uint(STEP.budget);
  if (budget >= n) {  // dense: every row
    for (uint t = tid; t < n; t += 64u) rows[base + t] = t;
    if (tid == 0u) counts[h] = n;
    return;
  }
  const uvec2 forced = forced_rows(p.sink, p.recent, budget);
  const uint sink = forced.x, recent = forced.y;
  const uint lo = sink, hi = n - recent, want = min(budget - sink - recent, hi - lo);
  for (uint t = tid; t < sink; t += 64u) rows[base + t] = t;
  for (uint t = tid; t < recent; t += 64u) rows[base + sink + t] = hi + t;
  uint ties;
  const uint threshold = radix_threshold(lo, hi, want, ties);
  first = sink + recent;
  gather_top(lo, hi, threshold, ties);
  if (tid == 0u) counts[h] = first + want;
}
