#version 450
// Decode attention of one query head over its KV head's rows: 0..pos (dense), or with SPARSE the
// rows FASA's selection chose (rows[h][0..count[h])): scores, softmax, the weighted sum of values.
// One workgroup per query head; query heads g*group..g*group+group-1 share KV head g. Bindings: 0 q,
// 1 step, 2 K cache, 3 V cache, 4 scores scratch ([heads, n_ctx]), 5 out; SPARSE: 6 rows
// ([heads, n_ctx]), 7 counts ([heads]).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 2) readonly buffer KCache { float16_t k_cache[]; };
layout(std430, binding = 3) readonly buffer VCache { float16_t v_cache[]; };
layout(std430, binding = 4) buffer Scores { float scores[]; };
layout(std430, binding = 5) writeonly buffer Out { float o[]; };
#ifdef SPARSE
layout(std430, binding = 6) readonly buffer Rows { uint rows_of[]; };
layout(std430, binding = 7) readonly buffer Counts { uint counts[]; };
#endif
layout(push_constant) uniform Push { uint head_dim, n_ctx, group; float scale; } p;

shared float partial[64];

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
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, g = h / p.group, D = p.head_dim;
  const uint qs = h * D, rows = g * p.n_ctx, s0 = h * p.n_ctx;
#ifdef SPARSE
  const uint n = counts[h];
#define ROW(i) rows_of[s0 + (i)]
#else
  const uint n = uint(step_pos) + 1u;
#define ROW(i) (i)
#endif
  float m = -1.0 / 0.0;
  for (uint t = tid; t < n; t += 64u) {
    float s = 0.0;
    const uint row = ROW(t);
    for (uint d = 0u; d < D; ++d) s += q[qs + d] * float(k_cache[(rows + row) * D + d]);
    s *= p.scale;
    scores[s0 + t] = s;
    m = max(m, s);
  }
  m = reduce(m, 0u);
  float sum = 0.0;
  for (uint t = tid; t < n; t += 64u) {
    const float e = exp(scores[s0 + t] - m);
    scores[s0 + t] = e;
    sum += e;
  }
  sum = reduce(sum, 1u);
  memoryBarrierBuffer();
  barrier();
  for (uint d = tid; d < D; d += 64u) {
    float acc = 0.0;
    for (uint t = 0u; t < n; ++t) acc += scores[s0 + t] * float(v_cache[(rows + ROW(t)) * D + d]);
    o[qs + d] = acc / sum;
  }
}
