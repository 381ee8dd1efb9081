#pragma once
// The feed-forward of a mixture of experts (qwen3moe, Mixtral-style llama): a router picks each token's
// experts, and each expert's matmuls run once over all the tokens that picked it.
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace fasa {

struct ExpertScratch {
  std::vector<float> probs;    // [n, n_expert] the router's softmax per token
  std::vector<int> chosen;     // [n, n_expert_used] each token's experts, best first
  std::vector<float> weights;  // [n, n_expert_used] their weights (renormalised to sum to 1)
  std::vector<float> xs, gate, up;  // one expert's tokens: [m, n_embd], [m, n_ff_exp] x 2
  std::vector<float> ys;       // [n * n_expert_used, n_embd] every expert's outputs, expert after expert
  std::vector<float> out;      // [n, n_embd] the result
};

// out[t] = sum over token t's top n_expert_used experts e (by the router's softmax p) of
// p_e / (sum of the chosen p, or 1 where not c.expert_weights_norm) * down_e(silu(gate_e x[t]) * up_e x[t]). Each token's terms are added in
// the order of the experts' ids, so its result does not depend on the other tokens of the batch (as far
// as the matmuls' results do not: ops/matmul.h).
// x: [n, n_embd]; the result in s.out
void expert_ffn(const ModelConfig& c, const LayerWeights& L, const float* x, int n, ExpertScratch& s);

}  // namespace fasa
