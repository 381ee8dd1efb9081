#include "model/arch.h"

namespace fasa {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> rows = {
      {.name = "llama", .hf_model_types = {"llama", "mistral", "mixtral"},
       .note = "incl. Mistral- and Mixtral-style", .gguf_rope = RopeLayout::Normal,
       .hf_params = mixtral_hf_params, .hf_names = mixtral_hf_names},
      {.name = "qwen2", .hf_model_types = {"qwen2"}, .note = "", .gguf_rope = RopeLayout::Neox, .qkv_bias = true},
      {.name = "qwen3", .hf_model_types = {"qwen3"}, .note = "", .gguf_rope = RopeLayout::Neox, .qk_norm = true},
      {.name = "qwen3moe", .hf_model_types = {"qwen3_moe"}, .note = "", .gguf_rope = RopeLayout::Neox,
       .qk_norm = true, .needs_experts = true, .hf_params = qwen3moe_hf_params},
      {.name = "phi3", .hf_model_types = {"phi3"}, .note = "", .gguf_rope = RopeLayout::Neox,
       .fused_matrices = true},
      {.name = "gemma3", .hf_model_types = {"gemma3_text"}, .note = "", .gguf_rope = RopeLayout::Neox,
       .qk_norm = true, .gemma_blocks = true, .gguf_params = gemma3_gguf_params,
       .hf_params = gemma3_hf_params, .hf_names = gemma3_hf_names},
  };
  return rows;
}

void Architecture::apply(ModelConfig& c, bool hf) const {
  c.arch = name;
  c.rope_layout = hf ? RopeLayout::Neox : gguf_rope;
  c.qkv_bias = qkv_bias;
  c.qk_norm = qk_norm;
  c.embd_scale = c.post_norms = c.gelu_ffn = gemma_blocks;
}

const Architecture* find_gguf_architecture(const std::string& name) {
  for (const Architecture& a : architectures())
    if (name == a.name) return &a;
  return nullptr;
}

const Architecture* find_hf_architecture(const std::string& model_type) {
  for (const Architecture& a : architectures())
    for (const char* t : a.hf_model_types)
      if (model_type == t) return &a;
  return nullptr;
}

std::string supported_gguf_architectures() {
  std::string s;
  for (const Architecture& a : architectures())
    s += (s.empty() ? "" : ", ") + std::string(a.name) + (*a.note ? std::string(" (") + a.note + ")" : "");
  return s;
}

std::string supported_hf_model_types() {
  std::string s;
  for (const Architecture& a : architectures())
    for (const char* t : a.hf_model_types) s += (s.empty() ? "" : ", ") + std::string(t);
  return s;
}

}  // namespace fasa
