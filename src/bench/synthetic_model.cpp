#include "bench/synthetic_model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "io/gguf_writer.h"
#include "model/arch.h"
#include "fasa/error.h"

namespace fasa {

const std::vector<ModelShape>& model_shapes() {
  static const std::vector<ModelShape> shapes = {
      {"llama3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 131072, 500000.0f, 32.0f, true},
      {"llama3.1-8b", "llama", 32, 4096, 32, 8, 14336, 128256, 131072, 500000.0f, 8.0f, false},
      {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1000000.0f, 0.0f, true},
      {"phi3-mini", "phi3", 32, 3072, 32, 32, 8192, 32064, 4096, 10000.0f, 0.0f, false},
      // two layers with GQA, for the tests against llama.cpp's outputs (tests/golden/arch/)
      {"phi3-tiny", "phi3", 2, 256, 4, 2, 512, 1024, 4096, 10000.0f, 0.0f, false},
      {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 6144, 151936, 40960, 1000000.0f, 0.0f, false, 128, 128, 8, 768},
      // two layers, 2 of 8 experts per token, for the tests against llama.cpp's outputs
      {"qwen3moe-tiny", "qwen3moe", 2, 256, 4, 2, 512, 1024, 4096, 1000000.0f, 0.0f, false, 0, 8, 2, 128},
      {"gemma3-1b", "gemma3", 26, 1152, 4, 1, 6912, 262144, 32768, 1000000.0f, 0.0f, true, 256, 0, 0, 0, 512, 0.0f, 1e-6f},
      {"gemma3-4b", "gemma3", 34, 2560, 8, 4, 10240, 262208, 131072, 1000000.0f, 0.0f, true, 256, 0, 0, 0, 1024, 8.0f, 1e-6f},
      // six layers (five local with a window of 16, one global), for the tests against llama.cpp's outputs
      {"gemma3-tiny", "gemma3", 6, 256, 4, 2, 512, 1024, 4096, 1000000.0f, 0.0f, true, 64, 0, 0, 0, 16, 0.0f, 1e-6f},
  };
  return shapes;
}

const ModelShape& find_model_shape(const std::string& name) {
  std::string known;
  for (const auto& s : model_shapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw Error("unknown model shape '" + name + "' (known: " + known + ")");
}

namespace {

// splitmix64: a fast seeded stream; each tensor and each chunk of it gets its own seed.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return (float)(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }  // [-1, 1)
};

void put_half(uint8_t* at, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(at, &h, 2);
}

void random_f32_row(Rng& rng, uint8_t* p, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale * rng.uniform();
    std::memcpy(p + 4 * i, &v, 4);
  }
}

void random_f16_row(Rng& rng, uint8_t* p, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) put_half(p + 2 * i, scale * rng.uniform());
}

// Blocks of 32: an fp16 scale that gives ~`scale` at the largest quant (kTop), then random quant bytes.
template <int kBlockBytes, int kTop>
void random_block32_row(Rng& rng, uint8_t* p, int64_t n, float scale) {
  for (int64_t b = 0; b < n / 32; ++b) {
    uint8_t* blk = p + b * kBlockBytes;
    put_half(blk, scale / kTop);
    for (int j = 2; j < kBlockBytes; j += 8) {
      const uint64_t v = rng.next();
      std::memcpy(blk + j, &v, std::min(8, kBlockBytes - j));
    }
  }
}

// The types make-model writes, one row each.
struct RandomRows {
  DType type;
  void (*fill_row)(Rng& rng, uint8_t* row, int64_t n, float scale);
};
constexpr RandomRows kWrittenTypes[] = {{DType::F32, random_f32_row},
                                        {DType::F16, random_f16_row},
                                        {DType::Q8_0, random_block32_row<34, 127>},
                                        {DType::Q4_0, random_block32_row<18, 8>}};

const RandomRows* written(DType type) {
  for (const RandomRows& w : kWrittenTypes)
    if (w.type == type) return &w;
  return nullptr;
}

// Random weights of magnitude ~`scale`: quant bytes anything, block scales sane halves.
GgufWriter::Fill random_fill(DType type, int64_t row_len, float scale, uint64_t seed) {
  const RandomRows* w = written(type);
  if (!w) throw Error(std::string("make-model: weight type ") + dtype_name(type) + " is not supported");
  return [=](uint8_t* out, size_t n_bytes) {
    const size_t row_bytes = dtype_bytes(type, row_len), rows = n_bytes / row_bytes;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; ++r) {
      Rng rng{seed * 0x100000001b3ull + r};
      w->fill_row(rng, out + r * row_bytes, row_len, scale);
    }
  };
}

}  // namespace

void write_byte_vocabulary(GgufWriter& w, const std::vector<std::string>& pieces, const std::string& model) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  for (const auto& p : pieces) {
    tokens.push_back(p);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -(float)i;
  w.kv_string("tokenizer.ggml.model", model);
  w.kv_string_array("tokenizer.ggml.tokens", tokens);
  w.kv_f32_array("tokenizer.ggml.scores", scores);
  w.kv_i32_array("tokenizer.ggml.token_type", types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
}

void write_llama_hparams(GgufWriter& w, const ModelShape& s) {
  const std::string a = s.arch + ".";
  w.kv_u32(a + "block_count", s.n_layer);
  w.kv_u32(a + "embedding_length", s.n_embd);
  w.kv_u32(a + "feed_forward_length", s.n_ff);
  w.kv_u32(a + "attention.head_count", s.n_head);
  w.kv_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.kv_u32(a + "context_length", s.n_ctx);
  w.kv_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.kv_f32(a + "rope.freq_base", s.rope_base);
  if (s.sliding_window > 0) w.kv_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.linear_rope_factor > 0) {
    w.kv_string(a + "rope.scaling.type", "linear");
    w.kv_f32(a + "rope.scaling.factor", s.linear_rope_factor);
  }
  if (s.head_dim > 0) {
    w.kv_u32(a + "attention.key_length", s.head_dim);
    w.kv_u32(a + "attention.value_length", s.head_dim);
  }
  if (s.n_expert > 0) {
    w.kv_u32(a + "expert_count", s.n_expert);
    w.kv_u32(a + "expert_used_count", s.n_expert_used);
    w.kv_u32(a + "expert_feed_forward_length", s.n_ff_exp);
  }
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return s;
}

std::string written_type_names() {  // "f32, f16, q8_0, q4_0"
  std::string names;
  for (const RandomRows& w : kWrittenTypes) names += (names.empty() ? "" : ", ") + lower(dtype_name(w.type));
  return names;
}

}  // namespace

DType synthetic_weight_type(const std::string& name) {
  for (const RandomRows& w : kWrittenTypes)
    if (lower(dtype_name(w.type)) == lower(name)) return w.type;
  throw Error("--type must be one of " + written_type_names() + " (not '" + name + "')");
}

void write_synthetic_model(const ModelShape& s, DType type, const std::string& path, uint64_t seed) {
  if (!written(type))
    throw Error(std::string("make-model: weight type ") + dtype_name(type) + " is not supported (" + written_type_names() + ")");
  const Architecture* arch = find_gguf_architecture(s.arch);
  if (!arch) throw Error("make-model: architecture '" + s.arch + "' is not one of " + supported_gguf_architectures());
  if (arch->needs_experts && s.n_expert == 0) throw Error("make-model: a " + s.arch + " shape needs experts");
  const int D = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.kv_string("general.architecture", s.arch);
  // Not the shape's name: llama.cpp reads "phi3" in general.name as a Phi-3 vocabulary's (its special tokens)
  w.kv_string("general.name", "fasa synthetic model (random weights)");
  w.kv_string("fasa.shape", s.name);
  write_llama_hparams(w, s);

  std::vector<std::string> fillers;  // numbered pieces up to the vocabulary size
  for (int i = 259; i < s.n_vocab; ++i) fillers.push_back("\xE2\x96\x81t" + std::to_string(i));
  write_byte_vocabulary(w, fillers);

  uint64_t tseed = seed * 1000;
  const int64_t E = s.n_embd, Q = (int64_t)s.n_head * D, KV = (int64_t)s.n_head_kv * D, F = s.n_ff;
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, int64_t n_expert = 1) {
    w.tensor_generated(name, n_expert > 1 ? std::vector<int64_t>{cols, rows, n_expert} : std::vector<int64_t>{cols, rows},
                       type, random_fill(type, cols, 0.05f, ++tseed));
  };
  auto ones = [&](const std::string& name, int64_t n) { w.tensor_f32(name, {n}, std::vector<float>(n, 1.0f)); };
  matrix("token_embd.weight", E, s.n_vocab);
  ones("output_norm.weight", E);
  if (!s.tied_output) matrix("output.weight", E, s.n_vocab);
  if (s.llama3_rope_factor > 0)
    w.tensor_f32("rope_freqs.weight", {D / 2}, llama3_rope_factors(D, s.rope_base, s.llama3_rope_factor, 1.0f, 4.0f, 8192));
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ones(p + "attn_norm.weight", E);
    if (arch->fused_matrices) {  // Q, K, V in one matrix, and gate and up
      matrix(p + "attn_qkv.weight", E, Q + 2 * KV);
    } else {
      matrix(p + "attn_q.weight", E, Q);
      matrix(p + "attn_k.weight", E, KV);
      matrix(p + "attn_v.weight", E, KV);
    }
    if (arch->qkv_bias)
      for (auto [t, n] : {std::pair{"q", Q}, {"k", KV}, {"v", KV}})
        w.tensor_f32(p + "attn_" + t + ".bias", {n}, std::vector<float>(n, 0.0f));
    if (arch->qk_norm) {
      ones(p + "attn_q_norm.weight", D);
      ones(p + "attn_k_norm.weight", D);
    }
    matrix(p + "attn_output.weight", Q, E);
    if (arch->gemma_blocks) {
      ones(p + "post_attention_norm.weight", E);
      ones(p + "post_ffw_norm.weight", E);
    }
    ones(p + "ffn_norm.weight", E);
    if (s.n_expert > 0) {  // the router in F32, as llama.cpp's quantizer keeps it
      w.tensor_generated(p + "ffn_gate_inp.weight", {E, s.n_expert}, DType::F32, random_fill(DType::F32, E, 0.05f, ++tseed));
      matrix(p + "ffn_gate_exps.weight", E, s.n_ff_exp, s.n_expert);
      matrix(p + "ffn_up_exps.weight", E, s.n_ff_exp, s.n_expert);
      matrix(p + "ffn_down_exps.weight", s.n_ff_exp, E, s.n_expert);
      continue;
    }
    if (arch->fused_matrices) {
      matrix(p + "ffn_up.weight", E, 2 * F);  // rows 0..F-1 the gate's, F..2F-1 the up projection's
    } else {
      matrix(p + "ffn_gate.weight", E, F);
      matrix(p + "ffn_up.weight", E, F);
    }
    matrix(p + "ffn_down.weight", F, E);
  }
  w.write_file(path);
}

}  // namespace fasa
