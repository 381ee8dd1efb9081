// What changes from one decode step to the next, written by the host before each submit: the
// token, its position, the sparse layers' budget in rows at this step, and RoPE's cos/sin per plane
// ([n_rot/2, 2], as the CPU computes them). Binding 1.
layout(std430, binding = 1) readonly buffer Step {
  int step_token;
  int step_pos;
  int step_budget;
  int step_pad;
  float step_cos_sin[];
};
