#pragma once
// Hyper-parameters of a Llama-family model (the rows of model/arch.h), format independent.
#include <string>
#include <vector>

#include "ops/rope_layout.h"

namespace fasa {

struct ModelConfig {
  std::string arch;        // a row of model/arch.h: "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma3"
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
  // Gemma 3: the embedding is scaled by sqrt(n_embd); the attention's and the FFN's outputs are
  // RMS-normed before they join the residual (post_norms); the FFN is GeGLU (tanh GELU) in place of
  // SwiGLU; queries are scaled by attn_scale (0: 1/sqrt(head_dim)); the logits are soft-capped to
  // +-final_softcap where that is set.
  bool embd_scale = false;
  bool post_norms = false;
  bool gelu_ffn = false;
  float attn_scale = 0.0f;
  float final_softcap = 0.0f;
  // Sliding-window (local) layers (Gemma 3: all but every sliding_period-th): position p attends to
  // positions p - sliding_window + 1 .. p only, and its cache keeps about that many rows. They rotate
  // with base rope_base_local and no frequency factors. 0: every layer is global.
  int sliding_window = 0;
  int sliding_period = 0;
  float rope_base_local = 10000.0f;

  bool sliding(int layer) const { return sliding_window > 0 && (layer + 1) % sliding_period != 0; }
  int n_global_layers() const;  // the layers that are not sliding (where a policy runs)
  float attention_scale() const;
  // "no scaling" (no factors, or all 1), "linear scaling" (every plane's factor the same) or "Llama-3
  // frequency scaling": for `fasa info`.
  const char* rope_scaling_name() const;

  // Angular frequency of each RoPE plane: base^(-2i/n_rot) / factor_i; `local`: a sliding layer's
  // (rope_base_local, no factors).   [n_rot/2]
  std::vector<float> rope_inv_freq(bool local = false) const;
  // Throws fasa::Error naming `source` when a value is out of range or inconsistent.
  void validate(const std::string& source) const;
};

// Llama-3 rope scaling rule (HF "rope_type": "llama3"): per-plane frequency divisors.   [n_rot/2]
std::vector<float> llama3_rope_factors(int n_rot, float base, float factor, float low_freq_factor,
                                       float high_freq_factor, int original_ctx);

}  // namespace fasa
