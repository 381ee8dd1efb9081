// What changes from one pass to the next, written by the host before each submit: for each token of
// the pass (one in a decode step, up to STEP_TOKENS of a prompt) its id, its position and the sparse
// layers' budget in rows at it; then RoPE's cos/sin per token and plane ([tokens, n_rot/2, 2], as the
// CPU computes them). A dispatch's workgroups in y are the pass's tokens: STEP is this invocation's.
// Binding 1.
#define STEP_TOKENS 32  // = kPassTokens in vulkan_session.cpp
struct StepToken {
  int token;
  int pos;
  int budget;
  int pad;
};
layout(std430, binding = 1) readonly buffer Step {
  StepToken step_tokens[STEP_TOKENS];
  float step_cos_sin[];
};
#define STEP step_tokens[gl_WorkGroupID.y]

// FASA's forced rows at a step with `budget` rows: sink and recent, together at most half the budget
// (forced_rows in select/attention_policy.h, the CPU's).
uvec2 forced_rows(uint sink, uint recent, uint budget) {
  const uint half_budget = budget / 2u, s = min(sink, half_budget);
  return uvec2(s, min(recent, half_budget - s));
}
