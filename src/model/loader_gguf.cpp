// GGUF -> Model: hyper-parameters from "{arch}.*" metadata, tensors by llama.cpp's names.
#include <cmath>
#include <map>

#include "io/gguf.h"
#include "model/arch.h"
#include "model/model.h"
#include "fasa/error.h"

namespace fasa {

namespace {

int int_param(const GgufFile& f, const std::string& key) {
  int64_t v = f.get_int(key);
  if (v < 0 || v > (1LL << 30)) fail(f.path(), "metadata '" + key + "' = " + std::to_string(v) + " is out of range");
  return (int)v;
}

int int_param(const GgufFile& f, const std::string& key, int def) {
  return f.find(key) ? int_param(f, key) : def;
}

}  // namespace

// Gemma 3's metadata, read as llama.cpp reads it: local layers every but sliding_window_pattern-th
// (default 6), their RoPE base rope.freq_base_swa (default 10000); linear rope scaling of the global
// layers; queries scaled by 1/sqrt(head_dim), but by 1/sqrt(n_embd / n_head) in the 27B (which GGUF does not
// say: llama.cpp knows it by its layer count).
void gemma3_gguf_params(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6);
  c.sliding_window = int_param(f, a + "attention.sliding_window", 0);
  if (const GgufValue* p = f.find(a + "attention.sliding_window_pattern"); p && p->type == GgufType::ARRAY)
    fail(f.path(), "a per-layer '" + a + "attention.sliding_window_pattern' array is not supported (a number is)");
  c.sliding_period = int_param(f, a + "attention.sliding_window_pattern", 6);
  c.rope_base_local = (float)f.get_float(a + "rope.freq_base_swa", 10000.0);
  if (f.find(a + "rope.scaling.type")) {
    const std::string type = f.get_string(a + "rope.scaling.type");
    const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
    if (type == "linear" && factor > 0) {
      c.rope_freq_factors.assign(c.n_rot / 2, (float)factor);
    } else if (type != "none") {
      fail(f.path(), "rope scaling '" + type + "' is not supported for gemma3 (linear is)");
    }
  }
  constexpr int kGemma3_27bLayers = 62;
  c.attn_scale = 1.0f / std::sqrt(c.n_layer == kGemma3_27bLayers ? (float)c.n_embd / (float)c.n_head : (float)c.head_dim);
  c.final_softcap = (float)f.get_float(a + "final_logit_softcapping", 0.0);
}

std::unique_ptr<Model> load_gguf_model(const std::string& path, bool map) {
  GgufFile f(path, map);
  auto m = std::make_unique<Model>();
  m->path = path;
  m->format = "gguf";
  ModelConfig& c = m->config;
  const std::string arch_name = f.get_string("general.architecture");
  const Architecture* arch = find_gguf_architecture(arch_name);
  if (!arch)
    fail(path, "architecture '" + arch_name + "' is not supported (supported: " + supported_gguf_architectures() + ")");
  arch->apply(c, false);
  const std::string a = c.arch + ".";
  c.n_layer = int_param(f, a + "block_count");
  c.n_embd = int_param(f, a + "embedding_length");
  c.n_expert = int_param(f, a + "expert_count", 0);
  if (arch->needs_experts && c.n_expert == 0) fail(path, "a " + c.arch + " model needs metadata '" + a + "expert_count'");
  if (c.n_expert > 0) {  // (Mixtral's GGUFs give the experts' size as feed_forward_length)
    c.n_expert_used = int_param(f, a + "expert_used_count");
    c.n_ff_exp = f.find(a + "expert_feed_forward_length") ? int_param(f, a + "expert_feed_forward_length")
                                                           : int_param(f, a + "feed_forward_length");
  }
  c.n_ff = c.n_expert > 0 ? int_param(f, a + "feed_forward_length", 0)  // (unused by a mixture of experts)
                          : int_param(f, a + "feed_forward_length");
  c.n_head = int_param(f, a + "attention.head_count");
  c.n_head_kv = int_param(f, a + "attention.head_count_kv", c.n_head);
  c.head_dim = int_param(f, a + "attention.key_length", c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.n_rot = int_param(f, a + "rope.dimension_count", c.head_dim);
  c.n_ctx_train = int_param(f, a + "context_length");
  c.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
  if (arch->gguf_params) arch->gguf_params(f, c);

  std::map<std::string, TensorRef> refs;
  for (auto& t : f.tensors()) refs[t.name] = TensorRef{t.name, path, t.type, t.ne, t.data};
  const TensorRef* tok = refs.count("token_embd.weight") ? &refs["token_embd.weight"] : nullptr;
  if (!tok || tok->ne.size() != 2) fail(path, "missing or misshaped tensor 'token_embd.weight'");
  c.n_vocab = (int)tok->ne[1];
  if (f.find(a + "vocab_size") && f.get_int(a + "vocab_size") != c.n_vocab)
    fail(path, a + "vocab_size " + std::to_string(f.get_int(a + "vocab_size")) + " disagrees with token_embd.weight (" +
                   std::to_string(c.n_vocab) + " rows)");
  c.tied_output = !refs.count("output.weight");
  if (auto it = refs.find("rope_freqs.weight"); it != refs.end()) {  // Llama-3 scaling, as the converter stores it
    const TensorRef& r = it->second;
    if (r.type != DType::F32 || r.ne.size() != 1 || r.ne[0] != c.n_rot / 2)
      fail(path, "tensor 'rope_freqs.weight' must be F32 [" + std::to_string(c.n_rot / 2) + "]");
    c.rope_freq_factors.assign((const float*)r.data, (const float*)r.data + r.ne[0]);
  }
  if (refs.count("rope_factors_long.weight") || refs.count("rope_factors_short.weight"))
    fail(path, "LongRoPE (rope_factors_long/short, the 128k Phi-3 models) is not supported yet");
  c.validate(path);

  const TensorNames names{.tok_embd = "token_embd.weight", .output_norm = "output_norm.weight",
                          .output = "output.weight", .attn_norm = "blk.{}.attn_norm.weight",
                          .wq = "blk.{}.attn_q.weight", .wk = "blk.{}.attn_k.weight", .wv = "blk.{}.attn_v.weight",
                          .bq = "blk.{}.attn_q.bias", .bk = "blk.{}.attn_k.bias", .bv = "blk.{}.attn_v.bias",
                          .q_norm = "blk.{}.attn_q_norm.weight", .k_norm = "blk.{}.attn_k_norm.weight",
                          .wo = "blk.{}.attn_output.weight", .ffn_norm = "blk.{}.ffn_norm.weight",
                          .w_gate = "blk.{}.ffn_gate.weight", .w_up = "blk.{}.ffn_up.weight",
                          .w_down = "blk.{}.ffn_down.weight", .wqkv = "blk.{}.attn_qkv.weight",
                          .w_gate_up = arch->fused_matrices ? "blk.{}.ffn_up.weight" : "",
                          .router = "blk.{}.ffn_gate_inp.weight", .exp_gate = "blk.{}.ffn_gate_exps.weight",
                          .exp_up = "blk.{}.ffn_up_exps.weight", .exp_down = "blk.{}.ffn_down_exps.weight",
                          .post_attn_norm = "blk.{}.post_attention_norm.weight",
                          .post_ffn_norm = "blk.{}.post_ffw_norm.weight"};
  m->weights = bind_weights(c, names, [&](const std::string& n) -> const TensorRef* {
    auto it = refs.find(n);
    return it == refs.end() ? nullptr : &it->second;
  }, path);
  m->weights.mappings.push_back(f.mapping());
  m->tokenizer = Tokenizer::from_gguf(f, c.n_vocab);
  m->tokenizer_kind = m->tokenizer.describe() + " from GGUF metadata";
  m->chat_template = f.get_string_opt("tokenizer.chat_template").value_or("");
  return m;
}

}  // namespace fasa
