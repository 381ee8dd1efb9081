#version 450
// x[t] = row `token` of the embedding W for each token t of the pass, as floats, times `scale`.
// Bindings: 0 W, 1 step, 2 x ([tokens, cols]).
#extension GL_GOOGLE_include_directive : require
#include "weights.glsl"
#include "step.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 2) writeonly buffer X { float x[]; };
layout(push_constant) uniform Push { uint cols; float scale; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.cols) x[gl_WorkGroupID.y * p.cols + i] = weight(uint(STEP.token), p.cols, i) * p.scale;
}
