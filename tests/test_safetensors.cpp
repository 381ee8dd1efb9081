// Hugging Face directories: a sharded copy of the real model (with an index) loads and computes
// exactly what the single-file original does; a phi3 directory (fused QKV and gate-up) computes what the
// Llama directory it was fused from does.
#include <filesystem>
#include <nlohmann/json.hpp>

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

  auto single = load_model(src_dir);
  auto sharded = load_model(dir);
  const std::vector<int32_t> tokens = single->tokenizer.encode("In the beginning God created", true);
  Session s1(*single, {}), s2(*sharded, {});
  std::vector<float> l1, l2;
  s1.eval(tokens, &l1);
  s2.eval(tokens, &l2);
  ASSERT_EQ(l1.size(), l2.size());
  EXPECT_EQ(l1, l2);
}

// llama3-rand's HF directory rewritten as phi3 (model_type "phi3", q/k/v_proj stacked into qkv_proj and
// gate/up_proj into gate_up_proj, as Phi-3 checkpoints store them): the same model, the same logits.
TEST(Safetensors, Phi3FusedMatricesEqualTheSeparateOnes) {
  FASA_REQUIRE_SHARED();
  const std::string src_dir = test::shared_dir() + "/models/llama3-rand/hf";
  SafetensorsModel src(src_dir);
  const std::string dir = test::temp_dir();
  fs::copy_file(fs::path(src_dir) / "tokenizer.model", fs::path(dir) / "tokenizer.model");
  nlohmann::json config = nlohmann::json::parse(test::read_file(src_dir + "/config.json"));
  config["model_type"] = "phi3";
  test::write_file(dir + "/config.json", config.dump());
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  auto put = [&](const std::string& name, const std::vector<std::string>& parts) {  // rows of parts, stacked
    const SafetensorInfo* first = src.find(parts[0]);
    std::vector<int64_t> shape = first->shape;
    shape[0] = 0;
    const size_t at = data.size();
    for (const std::string& p : parts) {
      const SafetensorInfo* t = src.find(p);
      shape[0] += t->shape[0];
      data.append(reinterpret_cast<const char*>(t->data), t->bytes);
    }
    header[name] = {{"dtype", dtype_str(first->type)}, {"shape", shape}, {"data_offsets", {at, data.size()}}};
  };
  for (auto& [name, t] : src.tensors()) {
    const size_t q = name.find("self_attn.q_proj.weight"), g = name.find("mlp.gate_proj.weight");
    if (q != std::string::npos) {
      const std::string layer = name.substr(0, q);
      put(layer + "self_attn.qkv_proj.weight",
          {name, layer + "self_attn.k_proj.weight", layer + "self_attn.v_proj.weight"});
    } else if (g != std::string::npos) {
      const std::string layer = name.substr(0, g);
      put(layer + "mlp.gate_up_proj.weight", {name, layer + "mlp.up_proj.weight"});
    } else if (name.find("k_proj") == std::string::npos && name.find("v_proj") == std::string::npos &&
               name.find("up_proj") == std::string::npos) {
      put(name, {name});
    }
  }
  const std::string h = header.dump();
  test::write_file(dir + "/model.safetensors", gguf_le64(h.size()) + h + data);

  auto llama = load_model(src_dir), phi3 = load_model(dir);
  EXPECT_EQ(phi3->config.arch, "phi3");
  const std::vector<int32_t> tokens = llama->tokenizer.encode("In the beginning God created", true);
  Session s1(*llama, {}), s2(*phi3, {});
  std::vector<float> l1, l2;
  s1.eval(tokens, &l1);
  s2.eval(tokens, &l2);
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
