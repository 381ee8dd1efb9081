#pragma once
// The architectures fasa runs, one row each: the names files give them, the switches of the forward pass
// they turn on, and the hooks that read what is particular to them. Both loaders and `make-model`'s writer
// read this table: a Llama variant is one row here (plus its tests, see docs/ARCHITECTURE.md).
#include <string>
#include <vector>
#include <nlohmann/json_fwd.hpp>

#include "model/config.h"

namespace fasa {

class GgufFile;
struct TensorNames;

struct Architecture {
  const char* name;                         // GGUF's general.architecture, and ModelConfig::arch
  std::vector<const char*> hf_model_types;  // the config.json model_type values that load as this row
  const char* note;                         // said beside the name in the list of supported ones
  RopeLayout gguf_rope;                     // (HF checkpoints are NeoX: their converter permutes llama's Q/K)
  bool qkv_bias = false;        // Q, K and V have biases (qwen2)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE
  bool fused_matrices = false;  // [Q; K; V] in one matrix and [gate; up] in one (phi3)
  bool needs_experts = false;   // a mixture of experts always (qwen3moe; llama's are optional: Mixtral)
  // Gemma's blocks: embedding scaled, outputs of attention and FFN normed, GeGLU; HF stores their RMSNorm
  // weights as w - 1 (GGUF as w).
  bool gemma_blocks = false;
  // What each format says beyond the common hyper-parameters (null: nothing), read after them.
  void (*gguf_params)(const GgufFile&, ModelConfig&) = nullptr;
  void (*hf_params)(const nlohmann::json& config, const std::string& path, ModelConfig&) = nullptr;
  // HF tensor names that differ from llama's (null: none), given the config read so far.
  void (*hf_names)(const ModelConfig&, TensorNames&) = nullptr;

  // Sets the row's switches in `c` (`hf`: the layout HF checkpoints have).
  void apply(ModelConfig& c, bool hf) const;
};

const std::vector<Architecture>& architectures();
// Null where no row has that name.
const Architecture* find_gguf_architecture(const std::string& name);
const Architecture* find_hf_architecture(const std::string& model_type);
// "llama (incl. ...), qwen2, ..." and "llama, mistral, ...": for messages.
std::string supported_gguf_architectures();
std::string supported_hf_model_types();

// The hooks, each defined beside its format's reader (loader_gguf.cpp, loader_hf.cpp).
void gemma3_gguf_params(const GgufFile& f, ModelConfig& c);
void gemma3_hf_params(const nlohmann::json& j, const std::string& path, ModelConfig& c);
void gemma3_hf_names(const ModelConfig& c, TensorNames& names);
void mixtral_hf_params(const nlohmann::json& j, const std::string& path, ModelConfig& c);
void mixtral_hf_names(const ModelConfig& c, TensorNames& names);
void qwen3moe_hf_params(const nlohmann::json& j, const std::string& path, ModelConfig& c);

}  // namespace fasa
