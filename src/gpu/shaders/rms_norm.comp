#version 450
// RMSNorm of `rows` rows of n floats (in place allowed): out[r] = x[from_row + r] / rms * w. One
// workgroup per row. The per-head Q/K norms of qwen3 are rows of head_dim; the head of a prompt's
// pass norms its last token's row (from_row). Bindings: 0 x, 1 w, 2 out.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push { uint n, rows; float eps; uint from_row; } p;

shared float partial[64];

void main() {
  const uint tid = gl_LocalInvocationID.x, base = (p.from_row + gl_WorkGroupID.x) * p.n, to = gl_WorkGroupID.x * p.n;
  float ss = 0.0;
  for (uint i = tid; i < p.n; i += 64u) ss += x[base + i] * x[base + i];
  partial[tid] = ss;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(p.n) + p.eps);
  for (uint i = tid; i < p.n; i += 64u) o[to + i] = x[base + i] * scale * w[i];
}
