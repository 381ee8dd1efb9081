#pragma once
// Hyper-parameters of a Llama-family model (llama, mistral-style llama, qwen2, qwen3, phi3), format independent.
#include <string>
#include <vector>

#include "ops/rope_layout.h"

namespace fasa {

struct ModelConfig {
  std::string arch;        // "llama", "qwen2", "qwen3" or "phi3"
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

  // Angular frequency of each RoPE plane: base^(-2i/n_rot) / factor_i.   [n_rot/2]
  std::vector<float> rope_inv_freq() const;
  // Throws fasa::Error naming `source` when a value is out of range or inconsistent.
  void validate(const std::string& source) const;
};

// Llama-3 rope scaling rule (HF "rope_type": "llama3"): per-plane frequency divisors.   [n_rot/2]
std::vector<float> llama3_rope_factors(int n_rot, float base, float factor, float low_freq_factor,
                                       float high_freq_factor, int original_ctx);

}  // namespace fasa
