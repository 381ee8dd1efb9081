#version 450
// y += b, elementwise, b repeated every `period` (the Q/K/V biases of qwen2, added to each token's
// row). Bindings: 0 y, 1 b.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform Push { uint n, period; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.n) y[i] += b[i % p.period];
}
