#version 450
// A decode step's attention from attention's parts: each head's parts' weighted values and sums
// rescaled to the largest of their maxima, summed, divided. One workgroup per query head, its
// threads over the dims. Bindings: 0 parts ([heads, split, head_dim + 2]: values, max, sum), 1 out
// ([heads, head_dim]).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Parts { float parts[]; };
layout(std430, binding = 1) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push { uint head_dim, split; } p;

void main() {
  const uint h = gl_WorkGroupID.x, D = p.head_dim, first = h * p.split * (D + 2u);
  float m = -1.0 / 0.0;
  for (uint i = 0u; i < p.split; ++i) m = max(m, parts[first + i * (D + 2u) + D]);
  for (uint d = gl_LocalInvocationID.x; d < D; d += 64u) {
    float acc = 0.0, sum = 0.0;
    for (uint i = 0u; i < p.split; ++i) {
      const uint at = first + i * (D + 2u);
      const float w = parts[at + D + 1u] > 0.0 ? exp(parts[at + D] - m) : 0.0;  // (empty parts: 0)
      acc += w * parts[at + d];
      sum += w * parts[at + D + 1u];
    }
    o[h * D + d] = acc / sum;
  }
}
