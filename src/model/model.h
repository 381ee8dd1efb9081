#pragma once
// A loaded model: hyper-parameters, weights and tokenizer, from a .gguf file or an HF directory.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "model/weights.h"

namespace fasa {

struct Model {
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  ModelConfig config;
  ModelWeights weights;
  Tokenizer tokenizer;
  std::string tokenizer_kind;   // e.g. "SentencePiece BPE (GGUF metadata)"
  std::string chat_template;    // the model's Jinja chat template text; empty when it has none

  int64_t n_params() const;
  // The matrices' bytes; one_token: those one token's step reads (one embedding row; a mixture of
  // experts: only the experts it uses).
  size_t weight_bytes(bool one_token = false) const;
  // Of those, the bytes held as this CPU's packed copy (the file's pages of its rows dropped); the rest
  // are read in place from the mapped file.
  size_t packed_weight_bytes() const { return weights.packed ? weights.packed->size() : 0; }
  // What the weights hold in memory once every one has been read: the packed copy and the rest of the
  // matrices' file bytes (a ceiling: an untied embedding's rows are paged in only as their tokens appear).
  size_t held_weight_bytes() const { return weight_bytes() - weights.dropped_file_bytes + packed_weight_bytes(); }
  // Once a device holds every matrix (called once): their file pages leave memory (a CPU read pages
  // them back in).
  void drop_file_pages();
};

// A dense F16 KV cache's bytes for n_ctx tokens (a sliding layer keeps its window).
size_t dense_kv_bytes(const ModelConfig& c, int64_t n_ctx);

struct LoadOptions {
  // Pack the matrices for this CPU's decode kernels (ops/packed_rows.h). Off where a device runs every
  // layer: it uploads the file's rows, and a packed copy would only hold memory.
  bool pack_for_cpu = true;
  // Every matrix dequantized to F32 (no packing): the values llama-quantize writes when it turns the
  // file into F32, multiplied with float activations (tests against llama.cpp's run of such a file).
  bool dequantize = false;
  // llama.cpp's --no-mmap (false): the files read into memory instead of mapped; the packed rows'
  // bytes are freed once packed, as a mapping's pages are dropped.
  bool mmap = true;
  // llama.cpp's --mlock: what decoding reads locked in RAM (ModelWeights::locked_bytes; where the
  // system refuses, a warning).
  bool mlock = false;
};

// `path` is a .gguf file or a Hugging Face model directory. Throws fasa::Error naming the file, also
// where the weights would take more than the memory available (util/memory.h), before reading them.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts = {});

// --- shared by the two loaders --------------------------------------------------------------

// One stored tensor as a loader sees it, in ggml dim order (ne[0] = contiguous row length).
struct TensorRef {
  std::string name;
  std::string file;
  DType type = DType::F32;
  std::vector<int64_t> ne;
  const uint8_t* data = nullptr;
};

// name -> tensor, or nullptr when absent.
using TensorLookup = std::function<const TensorRef*(const std::string& name)>;

// Tensor names of one architecture/format.
struct TensorNames {
  std::string tok_embd, output_norm, output;
  // Per-layer names hold "{}" where the layer number goes.
  std::string attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, w_gate, w_up, w_down;
  // Fused matrices, where a file has them: [Q; K; V] rows in one (used when present), and [gate; up]
  // rows in one (phi3's ffn_up: always; then w_gate and w_up are not looked up).
  std::string wqkv, w_gate_up;
  // A mixture of experts' router and its experts' matrices: all experts in one 3-D tensor each (ggml
  // order {cols, rows, n_expert}), or one tensor per expert where the name holds "{e}".
  std::string router, exp_gate, exp_up, exp_down;
  // Gemma's norms of the attention's and the FFN's outputs.
  std::string post_attn_norm, post_ffn_norm;
};

// Checks every tensor's presence, type and shape against `cfg` and builds the views. Errors about a
// missing tensor name `source` (the model file or directory); others name the tensor's own file.
ModelWeights bind_weights(const ModelConfig& cfg, const TensorNames& names, const TensorLookup& lookup,
                          const std::string& source);

// `map`: the files mapped (false: read into memory, LoadOptions::mmap).
std::unique_ptr<Model> load_gguf_model(const std::string& path, bool map = true);
std::unique_ptr<Model> load_hf_model(const std::string& dir, bool map = true);

}  // namespace fasa
