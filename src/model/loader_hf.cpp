// Hugging Face directory -> Model: config.json + safetensors (single or sharded) + tokenizer.model or .json.
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/arch.h"
#include "model/model.h"
#include "fasa/error.h"

namespace fasa {

namespace {

using nlohmann::json;

int int_field(const json& j, const char* key, const std::string& path, std::optional<int> def = std::nullopt) {
  if (!j.contains(key) || j[key].is_null()) {
    if (def) return *def;
    fail(path, std::string("missing field '") + key + "'");
  }
  if (!j[key].is_number_integer()) fail(path, std::string("field '") + key + "' is not an integer");
  int64_t v = j[key].get<int64_t>();
  if (v < 0 || v > (1LL << 30)) fail(path, std::string("field '") + key + "' = " + std::to_string(v) + " is out of range");
  return (int)v;
}

double num_field(const json& j, const char* key, const std::string& path, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) fail(path, std::string("field '") + key + "' is not a number");
  return j[key].get<double>();
}

}  // namespace

// Gemma 3's text config (its row switches on the blocks: GeGLU, the extra norms): local layers every but
// sliding_window_pattern-th (or as layer_types lists them), queries scaled by query_pre_attn_scalar.
void gemma3_hf_params(const json& j, const std::string& path, ModelConfig& c) {
  const std::string act = j.value("hidden_activation", std::string("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh") fail(path, "hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh is)");
  if (j.contains("attn_logit_softcapping") && !j["attn_logit_softcapping"].is_null())
    fail(path, "attn_logit_softcapping is not supported");
  c.final_softcap = (float)num_field(j, "final_logit_softcapping", path, 0.0);
  c.attn_scale = 1.0f / std::sqrt((float)num_field(j, "query_pre_attn_scalar", path, c.head_dim));
  c.rope_base_local = (float)num_field(j, "rope_local_base_freq", path, 10000.0);
  c.sliding_window = int_field(j, "sliding_window", path, 0);
  c.sliding_period = int_field(j, "sliding_window_pattern", path, 6);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {  // newer configs: each layer's kind
    const json& kinds = j["layer_types"];
    for (int l = 0; l < (int)kinds.size() && l < c.n_layer; ++l)
      if ((kinds[l] == "sliding_attention") != c.sliding(l))
        fail(path, "layer_types: only every " + std::to_string(c.sliding_period) +
                       "th layer global (sliding_window_pattern) is supported; layer " + std::to_string(l) + " differs");
  }
}

// Gemma's feed-forward norm is its "pre_feedforward_layernorm"; "post_attention_layernorm", llama's
// feed-forward norm, is a norm of the attention's output there.
void gemma3_hf_names(const ModelConfig&, TensorNames& n) { n.ffn_norm = "model.layers.{}.pre_feedforward_layernorm.weight"; }

// A mixture of experts (qwen3_moe): num_experts of size moe_intermediate_size in every layer.
void qwen3moe_hf_params(const json& j, const std::string& path, ModelConfig& c) {
  c.n_expert = int_field(j, "num_experts", path);
  c.n_ff_exp = int_field(j, "moe_intermediate_size", path);
  c.expert_weights_norm = j.value("norm_topk_prob", false);
  const json& dense = j.value("mlp_only_layers", json::array());
  if (int_field(j, "decoder_sparse_step", path, 1) != 1 || (dense.is_array() && !dense.empty()))
    fail(path, "dense layers among the experts' (decoder_sparse_step, mlp_only_layers) are not supported");
  if (c.n_expert < 1) fail(path, "a qwen3_moe model needs at least one expert");
  c.n_expert_used = int_field(j, "num_experts_per_tok", path);
}

// Mixtral (model_type "mixtral", loaded as a llama): the experts' size is intermediate_size; the weights of the
// top k always sum to 1.
void mixtral_hf_params(const json& j, const std::string& path, ModelConfig& c) {
  if (j.value("model_type", std::string()) != "mixtral") return;
  c.n_expert = int_field(j, "num_local_experts", path);
  if (c.n_expert < 1) fail(path, "a mixtral model needs at least one expert");
  c.n_ff_exp = c.n_ff;
  c.n_expert_used = int_field(j, "num_experts_per_tok", path);
}

void mixtral_hf_names(const ModelConfig& c, TensorNames& n) {
  if (c.n_expert == 0) return;
  n.router = "model.layers.{}.block_sparse_moe.gate.weight";
  n.exp_gate = "model.layers.{}.block_sparse_moe.experts.{e}.w1.weight";
  n.exp_up = "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight";
  n.exp_down = "model.layers.{}.block_sparse_moe.experts.{e}.w2.weight";
}

namespace {

// rope_scaling: llama3's per-frequency factors, or Gemma 3's linear factor.
void read_hf_rope_scaling(const json& j, const std::string& cfg_path, const Architecture& arch, ModelConfig& c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& rs = j["rope_scaling"];
  if (!rs.is_object()) fail(cfg_path, "rope_scaling is not an object");
  const std::string rt = rs.value("rope_type", rs.value("type", std::string()));
  if (rt == "linear" && arch.gemma_blocks) {
    const float factor = (float)num_field(rs, "factor", cfg_path, 1.0);
    if (!(factor > 0)) fail(cfg_path, "rope_scaling factor must be positive");
    c.rope_freq_factors.assign(c.n_rot / 2, factor);
    return;
  }
  if (rt != "llama3") fail(cfg_path, "rope_scaling type '" + rt + "' is not supported (supported: llama3; linear for gemma3)");
  const float factor = (float)num_field(rs, "factor", cfg_path, 8.0);
  const float lo = (float)num_field(rs, "low_freq_factor", cfg_path, 1.0);
  const float hi = (float)num_field(rs, "high_freq_factor", cfg_path, 4.0);
  const int orig = int_field(rs, "original_max_position_embeddings", cfg_path, 8192);
  if (!(factor > 0) || !(hi > lo) || orig <= 0) fail(cfg_path, "rope_scaling parameters are inconsistent");
  c.rope_freq_factors = llama3_rope_factors(c.n_rot, c.rope_base, factor, lo, hi, orig);
}

// config.json's fields into `c` (the architecture's own after the common ones).
void read_hf_config(const json& j, const std::string& cfg_path, const Architecture& arch, ModelConfig& c) {
  arch.apply(c, true);
  c.n_layer = int_field(j, "num_hidden_layers", cfg_path);
  c.n_embd = int_field(j, "hidden_size", cfg_path);
  c.n_ff = int_field(j, "intermediate_size", cfg_path);
  c.n_head = int_field(j, "num_attention_heads", cfg_path);
  c.n_head_kv = int_field(j, "num_key_value_heads", cfg_path, c.n_head);
  c.head_dim = int_field(j, "head_dim", cfg_path, c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.n_rot = (int)(c.head_dim * num_field(j, "partial_rotary_factor", cfg_path, 1.0));
  c.n_rot -= c.n_rot % 2;  // rotary dims come in pairs
  c.n_vocab = int_field(j, "vocab_size", cfg_path);
  c.n_ctx_train = int_field(j, "max_position_embeddings", cfg_path, 4096);
  c.rms_eps = (float)num_field(j, "rms_norm_eps", cfg_path, 1e-6);
  c.rope_base = (float)num_field(j, "rope_theta", cfg_path, 10000.0);
  c.qkv_bias = c.qkv_bias || j.value("attention_bias", false);
  c.tied_output = j.value("tie_word_embeddings", false);
  if (arch.hf_params) arch.hf_params(j, cfg_path, c);
  read_hf_rope_scaling(j, cfg_path, arch, c);
  c.validate(cfg_path);
}

// The Hugging Face names of each tensor ("{}": the layer), the architecture's own changes applied.
TensorNames hf_tensor_names(const Architecture& arch, const ModelConfig& c) {
  TensorNames names{.tok_embd = "model.embed_tokens.weight", .output_norm = "model.norm.weight",
                    .output = "lm_head.weight", .attn_norm = "model.layers.{}.input_layernorm.weight",
                    .wq = "model.layers.{}.self_attn.q_proj.weight", .wk = "model.layers.{}.self_attn.k_proj.weight",
                    .wv = "model.layers.{}.self_attn.v_proj.weight", .bq = "model.layers.{}.self_attn.q_proj.bias",
                    .bk = "model.layers.{}.self_attn.k_proj.bias", .bv = "model.layers.{}.self_attn.v_proj.bias",
                    .q_norm = "model.layers.{}.self_attn.q_norm.weight",
                    .k_norm = "model.layers.{}.self_attn.k_norm.weight",
                    .wo = "model.layers.{}.self_attn.o_proj.weight",
                    .ffn_norm = "model.layers.{}.post_attention_layernorm.weight",
                    .w_gate = "model.layers.{}.mlp.gate_proj.weight", .w_up = "model.layers.{}.mlp.up_proj.weight",
                    .w_down = "model.layers.{}.mlp.down_proj.weight",
                    .wqkv = "model.layers.{}.self_attn.qkv_proj.weight",
                    .w_gate_up = arch.fused_matrices ? "model.layers.{}.mlp.gate_up_proj.weight" : "",
                    // a mixture of experts: one tensor per expert ("{e}")
                    .router = "model.layers.{}.mlp.gate.weight",
                    .exp_gate = "model.layers.{}.mlp.experts.{e}.gate_proj.weight",
                    .exp_up = "model.layers.{}.mlp.experts.{e}.up_proj.weight",
                    .exp_down = "model.layers.{}.mlp.experts.{e}.down_proj.weight",
                    .post_attn_norm = "model.layers.{}.post_attention_layernorm.weight",  // (Gemma's)
                    .post_ffn_norm = "model.layers.{}.post_feedforward_layernorm.weight"};
  if (arch.hf_names) arch.hf_names(c, names);
  return names;
}

// Gemma's norms multiply by 1 + w (GGUF files store the sum).
void shift_gemma_norms(ModelWeights& w) {
  auto shift = [](std::vector<float>& v) {
    for (float& x : v) x += 1.0f;
  };
  shift(w.output_norm);
  for (LayerWeights& L : w.layers)
    for (auto* v : {&L.attn_norm, &L.q_norm, &L.k_norm, &L.post_attn_norm, &L.ffn_norm, &L.post_ffn_norm}) shift(*v);
}

// tokenizer_config.json (add_bos_token, chat_template) and tokenizer.model or tokenizer.json.
void read_hf_tokenizer(const std::string& dir, Model& m) {
  namespace fs = std::filesystem;
  const ModelConfig& c = m.config;
  bool add_bos = true;
  const fs::path tok_cfg = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(tok_cfg)) {
    json tc = read_json_file(tok_cfg.string());
    if (tc.is_object() && tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean())
      add_bos = tc["add_bos_token"].get<bool>();
    // A string, or a list of named templates ({name, template}) of which "default" is used.
    const json tpl = tc.is_object() ? tc.value("chat_template", json()) : json();
    if (tpl.is_string()) m.chat_template = tpl.get<std::string>();
    else if (tpl.is_array())
      for (const json& t : tpl)
        if (t.is_object() && t.value("name", json()) == "default" && t.value("template", json()).is_string())
          m.chat_template = t["template"].get<std::string>();
  }
  const fs::path spm = fs::path(dir) / "tokenizer.model", tok_json = fs::path(dir) / "tokenizer.json";
  if (fs::exists(spm)) {
    m.tokenizer = Tokenizer::from_sentencepiece(spm.string(), add_bos, c.n_vocab);
    m.tokenizer_kind = m.tokenizer.describe() + " from tokenizer.model";
  } else if (fs::exists(tok_json)) {
    m.tokenizer = Tokenizer::from_tokenizer_json(tok_json.string(), tok_cfg.string(), c.n_vocab);
    m.tokenizer_kind = m.tokenizer.describe() + " from tokenizer.json";
  } else {
    fail(dir, "no tokenizer.model (SentencePiece) or tokenizer.json in the model directory");
  }
}

std::unique_ptr<Model> read_hf_model(const std::string& dir, bool map) {
  namespace fs = std::filesystem;
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  json j = read_json_file(cfg_path);
  if (!j.is_object()) fail(cfg_path, "not a JSON object");
  auto m = std::make_unique<Model>();
  m->path = dir;
  m->format = "safetensors";
  ModelConfig& c = m->config;
  const std::string type = j.value("model_type", std::string());
  const Architecture* arch = find_hf_architecture(type);
  if (!arch)
    fail(cfg_path, "model_type '" + type + "' is not supported (supported: " + supported_hf_model_types() + ")");
  read_hf_config(j, cfg_path, *arch, c);

  SafetensorsModel st(dir, map);
  std::map<std::string, TensorRef> refs;
  for (auto& [name, t] : st.tensors()) {
    TensorRef r{name, t.file, t.type, std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()), t.data};
    refs.emplace(name, std::move(r));
  }
  if (!c.tied_output && !refs.count("lm_head.weight")) c.tied_output = true;  // some exports omit it when tied
  m->weights = bind_weights(c, hf_tensor_names(*arch, c), [&](const std::string& n) -> const TensorRef* {
    auto it = refs.find(n);
    return it == refs.end() ? nullptr : &it->second;
  }, dir);
  m->weights.mappings = st.mappings();
  if (arch->gemma_blocks) shift_gemma_norms(m->weights);
  read_hf_tokenizer(dir, *m);
  return m;
}

}  // namespace

std::unique_ptr<Model> load_hf_model(const std::string& dir, bool map) {
  return with_json_errors(dir, [&] { return read_hf_model(dir, map); });
}

}  // namespace fasa
