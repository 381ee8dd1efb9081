#version 450
// Attention of one query head at one token over its KV head's rows: 0..pos (dense: decode, and each
// token of a prompt), or with SPARSE the rows a decode step's selection chose
// (rows[h][0..count[h])). The rows go 64 at a time with a running maximum and sum (online
// softmax), so no scratch grows with the context. A decode step splits each head's rows over `split`
// workgroups (long contexts keep the device busy), each leaving its part — running maximum, sum and
// weighted values — for attention_merge; with split 1 the result goes straight to `out`. Workgroups:
// query heads x split in x, the pass's tokens in y; query heads g*group..g*group+group-1 share KV
// head g; each thread keeps up to 4 of the head's dims (head_dim <= 256). Bindings: 0 q ([tokens,
// heads, head_dim]), 1 step, 2 K cache, 3 V cache ([heads_kv, n_ctx, head_dim] F16), 4 out (as q),
// 5 parts ([heads, split, head_dim + 2]: values, max, sum); SPARSE: 6 rows ([heads, n_ctx]), 7 counts
// ([heads]).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 2) readonly buffer KCache { float16_t k_cache[]; };
layout(std430, binding = 3) readonly buffer VCache { float16_t v_cache[]; };
layout(std430, binding = 4) writeonly buffer Out { float o[]; };
layout(std430, binding = 5) writeonly buffer Parts { float parts[]; };
#ifdef SPARSE
layout(std430, binding = 6) readonly buffer Rows { uint rows_of[]; };
layout(std430, binding = 7) readonly buffer Counts { uint counts[]; };
#endif
layout(push_constant) uniform Push { uint head_dim, n_ctx, group; float scale; uint split; } p;

shared float partial[64];
shared float weights[64];  // the chunk's exp(score - running max)

// Max (op 0) or sum (op 1) of every thread's `v`, returned to all.
float reduce(float v, uint op) {
  const uint tid = gl_LocalInvocationID.x;
  partial[tid] = v;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (tid < s) partial[tid] = op == 0u ? max(partial[tid], partial[tid + s]) : partial[tid] + partial[tid + s];
    barrier();
  }
  const float r = partial[0];
  barrier();
  return r;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x / p.split, part = gl_WorkGroupID.x % p.split;
  const uint g = h / p.group, D = p.head_dim, heads = gl_NumWorkGroups.x / p.split;
  const uint qs = (gl_WorkGroupID.y * heads + h) * D, rows = g * p.n_ctx;
#ifdef SPARSE
  const uint n_all = counts[h];
#define ROW(i) rows_of[h * p.n_ctx + (i)]
#else
  const uint n_all = uint(STEP.pos) + 1u;
#define ROW(i) (i)
#endif
  // This part's rows: first..n-1 (at least 64 a part, so short contexts use few parts).
  const uint per = max(64u, (n_all + p.split - 1u) / p.split), first = min(n_all, part * per), n = min(n_all, first + per);
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  float m = -1.0 / 0.0, sum = 0.0;
  for (uint c = first; c < n; c += 64u) {
    float s = -1.0 / 0.0;
    if (c + tid < n) {
      const uint at = (rows + ROW(c + tid)) * D;
      s = 0.0;
      for (uint d = 0u; d < D; ++d) s += q[qs + d] * float(k_cache[at + d]);
      s *= p.scale;
    }
    const float new_m = max(m, reduce(s, 0u));  // finite: the chunk has a row
    const float e = c + tid < n ? exp(s - new_m) : 0.0;
    weights[tid] = e;
    const float rescale = exp(m - new_m);  // 0 at the first chunk
    sum = sum * rescale + reduce(e, 1u);   // (its barriers publish `weights`)
    const uint k = min(64u, n - c);
    for (uint a = 0u; a < 4u; ++a) {
      const uint d = tid + 64u * a;
      if (d >= D) break;
      float v = 0.0;
      for (uint j = 0u; j < k; ++j) v += weights[j] * float(v_cache[(rows + ROW(c + j)) * D + d]);
      acc[a] = acc[a] * rescale + v;
    }
    m = new_m;
    barrier();  // everyone has read `weights`
  }
  if (p.split == 1u) {
    for (uint a = 0u; a < 4u; ++a)
      if (tid + 64u * a < D) o[qs + tid + 64u * a] = acc[a] / sum;
    return;
  }
  const uint at = (h * p.split + part) * (D + 2u);  // (an empty part: max -inf, sum 0)
  for (uint a = 0u; a < 4u; ++a)
    if (tid + 64u * a < D) parts[at + tid + 64u * a] = acc[a];
  if (tid == 0u) {
    parts[at + D] = m;
    parts[at + D + 1u] = sum;
  }
}
