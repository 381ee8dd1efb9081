#pragma once
// Hyper-parameters of a Llama-family model (llama, mistral-style llama, qwen2, qwen3, qwen3moe, phi3), format
// independent.
#include <string>
#include <vector>

#include "ops/rope_layout.h"

namespace fasa {

struct ModelConfig {
  std::string arch;        // "llama", "qwen2", "qwen3", "qwen3moe" or "phi3"
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_rot = 0;           // rotary dims per head (<= head_dim)
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  RopeLayout rope_layout = RopeLayout::Normal;
  std::vector<float> rope_freq_factors;  // [n_rot/2] divisors of each plane's frequency; empty = none
  bool qkv_bias = false;
  bool qk_norm = false;    // qwen3: per-head RMSNorm of q and k before RoPE
  bool tied_output = false;
  // Mixture of experts (qwen3moe; Mixtral-style llama): each token's FFN is the sum of its top
  // n_expert_used experts' SwiGLU MLPs (hidden size n_ff_exp), weighted by the router's softmax,
  // renormalised over the chosen ones where expert_weights_norm. 0 experts: the dense FFN of size n_ff.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  bool expert_weights_norm = true;

  // Angular frequency of each RoPE plane: base^(-2i/n_rot) / factor_i.   [n_rot/2]
  std::vector<float> rope_inv_freq() const;
  // Throws fasa::Error naming `source` when a value is out of range or inconsistent.
  void validate(const std::string& source) const;
};

// Llama-3 rope scaling rule (HF "rope_type": "llama3"): per-plane frequency divisors.   [n_rot/2]
std::vector<float> llama3_rope_factors(int n_rot, float base, float factor, float low_freq_factor,
                                       float high_freq_factor, int original_ctx);

}  // namespace fasa
