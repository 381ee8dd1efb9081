#pragma once
// Weight views into the mapped model file(s). Matrices stay in their stored type; the small 1-D
// tensors (norms, biases) are converted to float at load time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "io/mapped_file.h"
#include "ops/matrix.h"
#include "util/huge_buffer.h"

namespace fasa {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  Matrix wq;                     // [n_head * head_dim, n_embd]
  Matrix wk;                     // [n_head_kv * head_dim, n_embd]
  Matrix wv;                     // [n_head_kv * head_dim, n_embd]
  std::vector<float> bq;         // [n_head * head_dim] or empty
  std::vector<float> bk;         // [n_head_kv * head_dim] or empty
  std::vector<float> bv;         // [n_head_kv * head_dim] or empty
  std::vector<float> q_norm;     // [head_dim] or empty (qwen3)
  std::vector<float> k_norm;     // [head_dim] or empty (qwen3)
  Matrix wo;                     // [n_embd, n_head * head_dim]
  std::vector<float> post_attn_norm;  // [n_embd] or empty (gemma3: of the attention's output)
  std::vector<float> ffn_norm;   // [n_embd]
  Matrix w_gate;                 // [n_ff, n_embd]
  Matrix w_up;                   // [n_ff, n_embd]
  Matrix w_down;                 // [n_embd, n_ff]
  std::vector<float> post_ffn_norm;  // [n_embd] or empty (gemma3: of the FFN's output)
  // Mixture of experts (n_expert > 0) in place of w_gate, w_up, w_down:
  Matrix router;                  // [n_expert, n_embd]
  std::vector<Matrix> exp_gate;   // [n_expert] of [n_ff_exp, n_embd]
  std::vector<Matrix> exp_up;     // [n_expert] of [n_ff_exp, n_embd]
  std::vector<Matrix> exp_down;   // [n_expert] of [n_embd, n_ff_exp]
};

struct ModelWeights {
  Matrix tok_embd;                  // [n_vocab, n_embd]
  std::vector<LayerWeights> layers;  // [n_layer]
  std::vector<float> output_norm;   // [n_embd]
  Matrix output;                    // [n_vocab, n_embd]; the embedding itself when tied
  std::vector<std::shared_ptr<const MappedFile>> mappings;  // keep the bytes above alive
  std::vector<std::vector<uint8_t>> owned;  // aligned copies of misaligned tensors
  std::optional<HugeBuffer> packed;  // the matrices' packed copies, one after another (Matrix::packed)
  size_t dropped_file_bytes = 0;     // the file's bytes whose pages were dropped (packed there, or on a device)
  uint64_t sampled_hash = 0;         // of samples of every matrix's file bytes (calib's model fingerprint)
  size_t locked_bytes = 0;           // locked in RAM (LoadOptions::mlock)
};

}  // namespace fasa
