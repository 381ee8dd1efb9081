#version 450
// gate = silu(gate) * up, elementwise (the MLP's activation). Bindings: 0 gate, 1 up.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly buffer Up { float up[]; };
layout(push_constant) uniform Push { uint n; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.n) gate[i] = gate[i] / (1.0 + exp(-gate[i])) * up[i];
}
