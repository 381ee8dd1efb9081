// Hugging Face directories: a sharded copy of the real model (with an index) loads and computes
// exactly what the single-file original does.
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
