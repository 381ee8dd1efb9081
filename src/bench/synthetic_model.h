#pragma once
// Synthetic models of real shapes for speed measurements: valid GGUF files with seeded random weights
// (decode speed depends on shapes and types, not on weight values) and a filler SentencePiece vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/dtype.h"

namespace fasa {

struct ModelShape {
  std::string name, arch;  // arch: a row of model/arch.h
  int n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base;
  float llama3_rope_factor;  // 0: no Llama-3 rope scaling
  bool tied_output;
  int head_dim = 0;  // 0: n_embd / n_head
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // a mixture of experts (qwen3moe)
  int sliding_window = 0;          // gemma3: its local layers' window (every 6th layer is global)
  float linear_rope_factor = 0.0f;  // gemma3: the global layers' linear rope scaling; 0: none
  float rms_eps = 1e-5f;
};

const std::vector<ModelShape>& model_shapes();
// Throws fasa::Error listing the known shapes when `name` is not one.
const ModelShape& find_model_shape(const std::string& name);

class GgufWriter;

// A SentencePiece vocabulary as tokenizer.ggml.* metadata: <unk> <s> </s>, the 256 byte tokens
// <0x00>..<0xFF>, then `pieces` as normal tokens (scores falling with the id). `model` is written as
// tokenizer.ggml.model (tests write others to see them refused).
void write_byte_vocabulary(GgufWriter& w, const std::vector<std::string>& pieces, const std::string& model = "llama");

// The Llama-family hyper-parameters of `shape` as GGUF metadata (ARCH.block_count, ARCH.embedding_length,
// ...; ARCH = shape.arch), after general.architecture: the keys every llama/qwen2 GGUF needs.
void write_llama_hparams(GgufWriter& w, const ModelShape& shape);

// Matrices in `type` (F32, F16, Q8_0 or Q4_0), norms in F32.
void write_synthetic_model(const ModelShape& shape, DType type, const std::string& path, uint64_t seed = 1);
// The weight type write_synthetic_model writes by its name, any case ("q8_0"): f32, f16, q8_0 or q4_0;
// throws naming them.
DType synthetic_weight_type(const std::string& name);

}  // namespace fasa
