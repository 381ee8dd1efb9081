// GGUF -> Model: hyper-parameters from "{arch}.*" metadata, tensors by llama.cpp's names.
#include <cmath>
#include <map>

#include "io/gguf.h"
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

// Gemma 3's metadata, read as llama.cpp reads it: local layers every but sliding_window_pattern-th
// (default 6), their RoPE base rope.freq_base_swa (default 10000); linear rope scaling of the global
// layers; queries scaled by 1/sqrt(head_dim), but by 1/sqrt(n_embd / n_head) in the 62-layer 27B.
void gemma3_params(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.embd_scale = c.post_norms = c.gelu_ffn = true;
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
  c.attn_scale = 1.0f / std::sqrt(c.n_layer == 62 ? (float)c.n_embd / (float)c.n_head : (float)c.head_dim);
  c.final_softcap = (float)f.get_float(a + "final_logit_softcapping", 0.0);
}

}  // namespace

std::unique_ptr<Model> load_gguf_model(const std::string& path) {
  GgufFile f(path);
  auto m = std::make_unique<Model>();
  m->path = path;
  m->format = "gguf";
  ModelConfig& c = m->config;
  c.arch = f.get_string("general.architecture");
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3moe" && c.arch != "phi3" &&
      c.arch != "gemma3")
    fail(path, "architecture '" + c.arch +
                   "' is not supported (supported: llama (incl. Mistral- and Mixtral-style), qwen2, qwen3, qwen3moe, phi3, "
                   "gemma3)");
  const std::string a = c.arch + ".";
  c.n_layer = int_param(f, a + "block_count");
  c.n_embd = int_param(f, a + "embedding_length");
  c.n_expert = int_param(f, a + "expert_count", 0);
  if (c.arch == "qwen3moe" && c.n_expert == 0) fail(path, "a qwen3moe model needs metadata '" + a + "expert_count'");
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
  c.rope_layout = c.arch == "llama" ? RopeLayout::Normal : RopeLayout::Neox;
  c.qkv_bias = c.arch == "qwen2";
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  if (c.arch == "gemma3") gemma3_params(f, c);

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

  TensorNames names{"token_embd.weight", "output_norm.weight", "output.weight",
                    "blk.{}.attn_norm.weight", "blk.{}.attn_q.weight", "blk.{}.attn_k.weight",
                    "blk.{}.attn_v.weight", "blk.{}.attn_q.bias", "blk.{}.attn_k.bias",
                    "blk.{}.attn_v.bias", "blk.{}.attn_q_norm.weight", "blk.{}.attn_k_norm.weight",
                    "blk.{}.attn_output.weight", "blk.{}.ffn_norm.weight",
                    "blk.{}.ffn_gate.weight", "blk.{}.ffn_up.weight", "blk.{}.ffn_down.weight",
                    "blk.{}.attn_qkv.weight", c.arch == "phi3" ? "blk.{}.ffn_up.weight" : "",
                    "blk.{}.ffn_gate_inp.weight", "blk.{}.ffn_gate_exps.weight", "blk.{}.ffn_up_exps.weight",
                    "blk.{}.ffn_down_exps.weight", "blk.{}.post_attention_norm.weight",
                    "blk.{}.post_ffw_norm.weight"};
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
