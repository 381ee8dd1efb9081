#version 450
// x = row `token` of the embedding W, as floats, times `scale`. Bindings: 0 W, 1 step, 2 x.
#extension GL_GOOGLE_include_directive : require
#include "weights.glsl"
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 2) writeonly buffer X { float x[]; };
layout(push_constant) uniform Push { uint cols; float scale; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.cols) x[i] = weight(uint(step_token), p.cols, i) * p.scale;
}
