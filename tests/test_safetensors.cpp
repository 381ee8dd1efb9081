// Hugging Face directories: a sharded copy of the real model (with an index) loads and computes
// exactly what the single-file original does; a phi3 directory (fused QKV and gate-up) computes what the
// Llama directory it was fused from does; Mixtral and Qwen3-MoE directories load their experts.
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "bench/synthetic_model.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/session.h"
#include "test_util.h"

namespace fasa {
namespace {

namespace fs = std::filesystem;

std::string dtype_str(DType t) { return t == DType::F32 ? "F32" : t == DType::F16 ? "F16" : "BF16"; }

// Writes `names` of `src` into one shard file; returns nothing, records names in the index.
void write_shard(const SafetensorsModel& src, const std::vector<std::string>& names, const std::string& path) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (auto& n : names) {
    const SafetensorInfo* t = src.find(n);
    header[n] = {{"dtype", dtype_str(t->type)}, {"shape", t->shape}, {"data_offsets", {data.size(), data.size() + t->bytes}}};
    data.append(reinterpret_cast<const char*>(t->data), t->bytes);
  }
  const std::string h = header.dump();
  test::write_file(path, gguf_le64(h.size()) + h + data);
}

// The logits of the same tokens through two models: what a rewritten directory must keep.
void expect_same_logits(const Model& a, const Model& b) {
  const std::vector<int32_t> tokens = a.tokenizer.encode("In the beginning God created", true);
  Session s1(a, {}), s2(b, {});
  std::vector<float> l1, l2;
  s1.prefill(tokens, &l1);
  s2.prefill(tokens, &l2);
  ASSERT_EQ(l1.size(), l2.size());
  EXPECT_EQ(l1, l2);
}

TEST(Safetensors, ShardedCopyOfRealModelGivesIdenticalLogits) {
  FASA_REQUIRE_SHARED();
  const std::string src_dir = test::shared_dir() + "/models/kjv-tiny/hf-f32";
  SafetensorsModel src(src_dir);
  const std::string dir = test::temp_dir();
  for (const char* f : {"config.json", "tokenizer.model", "tokenizer_config.json"})
    fs::copy_file(fs::path(src_dir) / f, fs::path(dir) / f);
  std::vector<std::string> a, b;
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (auto& [name, t] : src.tensors()) {
    const bool first = name.find("layers.0.") != std::string::npos || name.find("embed") != std::string::npos;
    (first ? a : b).push_back(name);
    index["weight_map"][name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_shard(src, a, dir + "/model-00001-of-00002.safetensors");
  write_shard(src, b, dir + "/model-00002-of-00002.safetensors");
  test::write_file(dir + "/model.safetensors.index.json", index.dump());

  expect_same_logits(*load_model(src_dir), *load_model(dir));
}

// One tensor of a rewritten directory: the rows of `sources` stacked, or `values` (F32) of `shape`.
struct OutTensor {
  std::string name;
  std::vector<const SafetensorInfo*> sources;
  std::vector<float> values;
  std::vector<int64_t> shape;
};
using TensorMap = std::function<std::vector<OutTensor>(const std::string& name, const SafetensorInfo& t,
                                                       const SafetensorsModel& src)>;

// A copy of llama3-rand's HF directory with its config edited and each tensor replaced by what `map`
// returns for it.
std::string rewritten_llama3_rand(const std::function<void(nlohmann::json&)>& edit, const TensorMap& map) {
  const std::string src_dir = test::shared_dir() + "/models/llama3-rand/hf";
  SafetensorsModel src(src_dir);
  const std::string dir = test::temp_dir();
  fs::copy_file(fs::path(src_dir) / "tokenizer.model", fs::path(dir) / "tokenizer.model");
  nlohmann::json config = nlohmann::json::parse(test::read_file(src_dir + "/config.json"));
  edit(config);
  test::write_file(dir + "/config.json", config.dump());
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (auto& [name, t] : src.tensors())
    for (const OutTensor& o : map(name, t, src)) {
      const size_t at = data.size();
      std::vector<int64_t> shape = o.sources.empty() ? o.shape : o.sources[0]->shape;
      if (!o.sources.empty()) shape[0] = 0;
      for (const SafetensorInfo* part : o.sources) {
        shape[0] += part->shape[0];
        data.append(reinterpret_cast<const char*>(part->data), part->bytes);
      }
      data.append(reinterpret_cast<const char*>(o.values.data()), o.values.size() * 4);
      header[o.name] = {{"dtype", o.sources.empty() ? "F32" : dtype_str(o.sources[0]->type)}, {"shape", shape},
                        {"data_offsets", {at, data.size()}}};
    }
  const std::string h = header.dump();
  test::write_file(dir + "/model.safetensors", gguf_le64(h.size()) + h + data);
  return dir;
}

// llama3-rand's HF directory rewritten as phi3 (model_type "phi3", q/k/v_proj stacked into qkv_proj and
// gate/up_proj into gate_up_proj, as Phi-3 checkpoints store them): the same model, the same logits.
TEST(Safetensors, Phi3FusedMatricesEqualTheSeparateOnes) {
  FASA_REQUIRE_SHARED();
  const std::string dir = rewritten_llama3_rand(
      [](nlohmann::json& c) { c["model_type"] = "phi3"; },
      [](const std::string& name, const SafetensorInfo& t, const SafetensorsModel& src) -> std::vector<OutTensor> {
        const size_t q = name.find("self_attn.q_proj.weight"), g = name.find("mlp.gate_proj.weight");
        if (q != std::string::npos) {
          const std::string layer = name.substr(0, q);
          return {{layer + "self_attn.qkv_proj.weight",
                   {&t, src.find(layer + "self_attn.k_proj.weight"), src.find(layer + "self_attn.v_proj.weight")}, {}, {}}};
        }
        if (g != std::string::npos) {
          const std::string layer = name.substr(0, g);
          return {{layer + "mlp.gate_up_proj.weight", {&t, src.find(layer + "mlp.up_proj.weight")}, {}, {}}};
        }
        for (const char* stacked : {"k_proj", "v_proj", "up_proj"})  // (in the fused matrices above)
          if (name.find(stacked) != std::string::npos) return {};
        return {{name, {&t}, {}, {}}};
      });
  auto llama = load_model(test::shared_dir() + "/models/llama3-rand/hf"), phi3 = load_model(dir);
  EXPECT_EQ(phi3->config.arch, "phi3");
  expect_same_logits(*llama, *phi3);
}

// Mixtral and Qwen3-MoE directories whose two experts are each the dense MLP, under a router of zeros
// (each weighs 1/2): the dense model's logits. The MoE names, config fields and renormalised weights.
TEST(Safetensors, TwoExpertsLikeTheDenseMlpEqualIt) {
  FASA_REQUIRE_SHARED();
  const int64_t E = 256;
  for (const bool qwen : {false, true}) {
    SCOPED_TRACE(qwen ? "qwen3_moe" : "mixtral");
    auto layer_of = [](const std::string& name) { return name.substr(0, name.find(".mlp.")); };
    auto norms = [&](const std::string& name, const SafetensorInfo& t, const SafetensorsModel&) {  // qwen3's, ones
      std::vector<OutTensor> out = {{name, {&t}, {}, {}}};
      const size_t at = name.find("self_attn.q_proj.weight");
      if (qwen && at != std::string::npos)
        for (const char* n : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
          out.push_back({name.substr(0, at) + n, {}, std::vector<float>(64, 1.0f), {64}});
      return out;
    };
    const std::string dense = rewritten_llama3_rand([&](nlohmann::json& c) { c["model_type"] = qwen ? "qwen3" : "llama"; }, norms);
    const std::string moe = rewritten_llama3_rand(
        [&](nlohmann::json& c) {
          c["model_type"] = qwen ? "qwen3_moe" : "mixtral";
          c[qwen ? "num_experts" : "num_local_experts"] = 2;
          c["num_experts_per_tok"] = 2;
          c["moe_intermediate_size"] = c["intermediate_size"];
          c["norm_topk_prob"] = true;
        },
        [&](const std::string& name, const SafetensorInfo& t, const SafetensorsModel& src) {
          std::vector<OutTensor> out = norms(name, t, src);
          for (auto [dense_name, mixtral_name, qwen_name] : {std::tuple{"gate_proj", "w1", "gate_proj"},
                                                              {"up_proj", "w3", "up_proj"}, {"down_proj", "w2", "down_proj"}}) {
            if (name.find(std::string("mlp.") + dense_name) == std::string::npos) continue;
            const std::string layer = layer_of(name);
            out.clear();
            for (int e = 0; e < 2; ++e)
              out.push_back({qwen ? layer + ".mlp.experts." + std::to_string(e) + "." + qwen_name + ".weight"
                                  : layer + ".block_sparse_moe.experts." + std::to_string(e) + "." + mixtral_name + ".weight",
                             {&t}, {}, {}});
            if (std::string(dense_name) == "gate_proj")
              out.push_back({layer + (qwen ? ".mlp.gate.weight" : ".block_sparse_moe.gate.weight"), {},
                             std::vector<float>(2 * E, 0.0f), {2, E}});
          }
          return out;
        });
    auto a = load_model(dense), b = load_model(moe);
    EXPECT_EQ(b->config.n_expert, 2);
    expect_same_logits(*a, *b);
  }
}

// A Gemma 3 text directory written from the gemma3-tiny GGUF (with kjv-tiny's vocabulary) as Hugging
// Face stores it: its names (post_attention_layernorm is the attention's output norm there), row-major
// shapes, and norms stored as w - 1 (Gemma's RMSNorm multiplies by 1 + w). The same logits.
TEST(Safetensors, Gemma3DirectoryEqualsItsGguf) {
  FASA_REQUIRE_SHARED();
  ModelShape shape = find_model_shape("gemma3-tiny");
  shape.n_vocab = 4096;  // kjv-tiny's tokenizer.model
  const std::string dir = test::temp_dir(), gguf = dir + "/gemma3.gguf";
  write_synthetic_model(shape, DType::F32, gguf, 4);
  const std::map<std::string, std::string> renamed = {
      {"token_embd.weight", "model.embed_tokens.weight"}, {"output_norm.weight", "model.norm.weight"},
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"}, {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
      {"attn_output", "self_attn.o_proj"}, {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}, {"post_ffw_norm", "post_feedforward_layernorm"}};
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  {
    GgufFile f(gguf);
    for (const GgufTensorInfo& t : f.tensors()) {
      std::string name = t.name;  // blk.L.KIND.weight -> model.layers.L.HF_KIND.weight
      if (name.rfind("blk.", 0) == 0) {
        const size_t a = name.find('.', 4), b = name.rfind('.');
        name = "model.layers." + name.substr(4, a - 4) + "." + renamed.at(name.substr(a + 1, b - a - 1)) + ".weight";
      } else {
        name = renamed.at(name);
      }
      std::vector<float> v((const float*)t.data, (const float*)t.data + t.bytes / 4);
      if (name.find("norm") != std::string::npos)
        for (float& x : v) x -= 1.0f;
      const size_t at = data.size();
      data.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      header[name] = {{"dtype", "F32"}, {"shape", std::vector<int64_t>(t.ne.rbegin(), t.ne.rend())},
                      {"data_offsets", {at, data.size()}}};
    }
  }
  const std::string h = header.dump();
  test::write_file(dir + "/model.safetensors", gguf_le64(h.size()) + h + data);
  fs::copy_file(test::shared_dir() + "/models/kjv-tiny/hf-f32/tokenizer.model", dir + "/tokenizer.model");
  const nlohmann::json config = {
      {"model_type", "gemma3_text"}, {"hidden_size", shape.n_embd}, {"intermediate_size", shape.n_ff},
      {"num_hidden_layers", shape.n_layer}, {"num_attention_heads", shape.n_head},
      {"num_key_value_heads", shape.n_head_kv}, {"head_dim", shape.head_dim}, {"vocab_size", shape.n_vocab},
      {"max_position_embeddings", shape.n_ctx}, {"rms_norm_eps", 1e-6}, {"rope_theta", shape.rope_base},
      {"rope_local_base_freq", 10000.0}, {"sliding_window", shape.sliding_window}, {"query_pre_attn_scalar", shape.head_dim},
      {"hidden_activation", "gelu_pytorch_tanh"}, {"tie_word_embeddings", true}, {"rope_scaling", nullptr},
      {"final_logit_softcapping", nullptr}, {"attn_logit_softcapping", nullptr},
      {"layer_types", {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                       "sliding_attention", "full_attention"}}};
  test::write_file(dir + "/config.json", config.dump());

  auto a = load_model(gguf), b = load_model(dir);
  EXPECT_EQ(b->config.arch, "gemma3");
  EXPECT_EQ(b->config.sliding_window, 16);
  std::vector<int32_t> tokens(40);  // past the window
  for (int i = 0; i < 40; ++i) tokens[i] = 1 + (i * 97) % 4000;
  Session s1(*a, {}), s2(*b, {});
  std::vector<float> l1, l2;
  s1.prefill(tokens, &l1);
  s2.prefill(tokens, &l2);
  EXPECT_EQ(l1, l2);
}

TEST(Safetensors, TensorsOfTheRealModelAreFound) {
  FASA_REQUIRE_SHARED();
  SafetensorsModel m(test::shared_dir() + "/models/kjv-tiny/hf");
  const SafetensorInfo* q = m.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, DType::BF16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{256, 256}));
}

}  // namespace
}  // namespace fasa
