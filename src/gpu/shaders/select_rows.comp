#version 450
// FASA's rows for one query head: every row while the budget covers the cache (pos + 1 rows);
// else the sink rows, the recent rows, and TIP's top (budget - sink - recent) of the rows between,
// found by a radix select on the scores (4 passes of 8 bits over order-preserving keys) and gathered
// in any order. One workgroup per query head. Bindings: 0 scores ([heads, n_ctx]), 1 step,
// 2 rows ([heads, n_ctx]), 3 counts ([heads]).
#extension GL_GOOGLE_include_directive : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Scores { float scores[]; };
layout(std430, binding = 2) writeonly buffer Rows { uint rows[]; };
layout(std430, binding = 3) writeonly buffer Counts { uint counts[]; };
layout(push_constant) uniform Push { uint n_ctx, sink, recent; } p;

shared uint histogram[256];
shared uint chosen_bin, still_needed, written, ties_taken;

// A float's bits as an unsigned key with the same order.
uint key_of(float f) {
  const uint u = floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, base = h * p.n_ctx;
  const uint n = uint(step_pos) + 1u, budget = uint(step_budget);
  if (budget >= n) {  // dense: every row
    for (uint t = tid; t < n; t += 64u) rows[base + t] = t;
    if (tid == 0u) counts[h] = n;
    return;
  }
  const uint sink = min(p.sink, budget), recent = min(p.recent, budget - sink);
  const uint lo = sink, hi = n - recent, want = min(budget - sink - recent, hi - lo);
  for (uint t = tid; t < sink; t += 64u) rows[base + t] = t;
  for (uint t = tid; t < recent; t += 64u) rows[base + sink + t] = hi + t;
  if (tid == 0u) {
    still_needed = want;
    written = 0u;
    ties_taken = 0u;
  }
  // The key of the want-th largest score, 8 bits at a time from the top.
  uint prefix = 0u, prefix_mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = tid; b < 256u; b += 64u) histogram[b] = 0u;
    barrier();
    for (uint t = lo + tid; t < hi; t += 64u) {
      const uint k = key_of(scores[base + t]);
      if ((k & prefix_mask) == prefix) atomicAdd(histogram[(k >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (tid == 0u) {
      uint above = 0u, b = 255u;
      for (;; --b) {
        if (above + histogram[b] >= still_needed || b == 0u) break;
        above += histogram[b];
      }
      chosen_bin = b;
      still_needed -= above;
    }
    barrier();
    prefix |= chosen_bin << uint(shift);
    prefix_mask |= 255u << uint(shift);
  }
  // Rows above the threshold key, then as many rows equal to it as still needed.
  const uint ties = still_needed, first = sink + recent;
  for (uint t = lo + tid; t < hi; t += 64u) {
    const uint k = key_of(scores[base + t]);
    bool take = k > prefix;
    if (k == prefix) take = atomicAdd(ties_taken, 1u) < ties;
    if (take) rows[base + first + atomicAdd(written, 1u)] = t;
  }
  if (tid == 0u) counts[h] = first + want;
}
