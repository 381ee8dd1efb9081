// A corrupted-file corpus generated from the bundled real model: truncations at every section
// boundary, every tensor-info field broken for every tensor, counts and hyper-parameters set to 0
// and to absurd values, NaN weights. Each file must load to a fasa::Error naming it — or, for NaN
// weights, load with a warning and fail the forward pass with an error — never crash.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "fasa/error.h"
#include "model/model.h"
#include "model/session.h"
#include "test_util.h"

namespace fasa {
namespace {

// Where the parts of a (trusted) GGUF sit, to corrupt them one at a time.
struct GgufLayout {
  struct Kv {
    std::string key;
    size_t value_type_pos, end;  // the u32 value type; one past the entry
  };
  struct TensorInfo {
    std::string name;
    size_t n_dims_pos, dims_pos, type_pos, offset_pos, end;
  };
  std::vector<Kv> kvs;
  std::vector<TensorInfo> tensors;
  size_t data_start = 0;
};

uint64_t u64_at(const std::string& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
uint32_t u32_at(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// One past a metadata value of `type` starting at `at`.
size_t skip_value(const std::string& b, uint32_t type, size_t at) {
  static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  if (type == 8) return at + 8 + u64_at(b, at);
  if (type == 9) {
    const uint32_t et = u32_at(b, at);
    const uint64_t n = u64_at(b, at + 4);
    at += 12;
    for (uint64_t i = 0; i < n; ++i) at = skip_value(b, et, at);
    return at;
  }
  return at + kSize[type];
}

GgufLayout walk(const std::string& b) {
  GgufLayout l;
  const uint64_t n_tensors = u64_at(b, 8), n_kv = u64_at(b, 16);
  size_t at = 24;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t len = u64_at(b, at);
    GgufLayout::Kv kv{b.substr(at + 8, len), at + 8 + len, 0};
    kv.end = skip_value(b, u32_at(b, kv.value_type_pos), kv.value_type_pos + 4);
    at = kv.end;
    l.kvs.push_back(kv);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t len = u64_at(b, at);
    GgufLayout::TensorInfo t{b.substr(at + 8, len), at + 8 + len, 0, 0, 0, 0};
    t.dims_pos = t.n_dims_pos + 4;
    t.type_pos = t.dims_pos + 8 * u32_at(b, t.n_dims_pos);
    t.offset_pos = t.type_pos + 4;
    t.end = t.offset_pos + 8;
    at = t.end;
    l.tensors.push_back(t);
  }
  l.data_start = (at + 31) / 32 * 32;
  return l;
}

std::string patched(std::string b, size_t at, const std::string& bytes) {
  b.replace(at, bytes.size(), bytes);
  return b;
}

struct CorruptFile {
  std::string name;
  std::string bytes;
};

// The corpus: about 400 files from the bundled model.
std::vector<CorruptFile> corpus(const std::string& real) {
  const GgufLayout l = walk(real);
  std::vector<CorruptFile> out;
  // Truncated at every section boundary (and one byte either side of the first few).
  std::vector<size_t> cuts = {0, 3, 4, 8, 16, 23, 24};
  for (const auto& kv : l.kvs) cuts.insert(cuts.end(), {kv.value_type_pos, kv.end - 1, kv.end});
  for (const auto& t : l.tensors) cuts.insert(cuts.end(), {t.n_dims_pos, t.offset_pos, t.end});
  cuts.insert(cuts.end(), {l.data_start, l.data_start + 1, real.size() / 2, real.size() - 1});
  for (size_t c : cuts) out.push_back({"truncated_at_" + std::to_string(c), real.substr(0, c)});
  // Counts: more tensors or metadata entries than the file holds, and absurd ones.
  for (uint64_t v : {u64_at(real, 8) + 1, (uint64_t)1 << 40, ~(uint64_t)0})
    out.push_back({"tensor_count_" + std::to_string(v), patched(real, 8, gguf_le64(v))});
  for (uint64_t v : {u64_at(real, 16) + 1, (uint64_t)1 << 40, ~(uint64_t)0})
    out.push_back({"kv_count_" + std::to_string(v), patched(real, 16, gguf_le64(v))});
  // Every tensor-info field of every tensor. The data section is left off (the header errors come
  // first) except for the offset cases, which need the data to be there.
  const std::string header = real.substr(0, l.data_start);
  for (const auto& t : l.tensors) {
    out.push_back({t.name + "_zero_dims", patched(header, t.n_dims_pos, gguf_le32(0))});
    out.push_back({t.name + "_five_dims", patched(header, t.n_dims_pos, gguf_le32(5))});
    out.push_back({t.name + "_dim_2^40", patched(header, t.dims_pos, gguf_le64((uint64_t)1 << 40))});
    out.push_back({t.name + "_dim_0", patched(header, t.dims_pos, gguf_le64(0))});
    out.push_back({t.name + "_type_99", patched(header, t.type_pos, gguf_le32(99))});
    out.push_back({t.name + "_type_q4_k", patched(header, t.type_pos, gguf_le32(12))});  // wrong size
  }
  for (size_t i = 0; i < l.tensors.size(); i += 11) {
    const auto& t = l.tensors[i];
    out.push_back({t.name + "_offset_past_end", patched(real, t.offset_pos, gguf_le64((uint64_t)1 << 50))});
    out.push_back({t.name + "_offset_misaligned", patched(real, t.offset_pos, gguf_le64(u64_at(real, t.offset_pos) + 2))});
    const auto& next = l.tensors[(i + 1) % l.tensors.size()];
    out.push_back({t.name + "_offset_overlaps", patched(real, t.offset_pos, gguf_le64(u64_at(real, next.offset_pos)))});
  }
  // Every integer hyper-parameter at 0 and at absurd sizes; every array length absurd.
  for (const auto& kv : l.kvs) {
    const uint32_t type = u32_at(real, kv.value_type_pos);
    const size_t value = kv.value_type_pos + 4;
    if (type == 4 && kv.key.rfind("llama.", 0) == 0)
      for (uint32_t v : {0u, 1u << 31, ~0u})
        out.push_back({kv.key + "_" + std::to_string(v), patched(real, value, gguf_le32(v))});
    if (type == 9) out.push_back({kv.key + "_length_2^40", patched(real, value + 4, gguf_le64((uint64_t)1 << 40))});
    if (type == 9) out.push_back({kv.key + "_element_type_99", patched(real, value, gguf_le32(99))});
    if (type == 8) out.push_back({kv.key + "_string_length_2^60", patched(real, value, gguf_le64((uint64_t)1 << 60))});
    out.push_back({kv.key + "_value_type_99", patched(real, kv.value_type_pos, gguf_le32(99))});
  }
  return out;
}

class CorruptCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(FASA_BUNDLED_MODEL)) GTEST_SKIP() << "bundled model missing: skipped";
    real_ = test::read_file(FASA_BUNDLED_MODEL);
  }
  std::string real_;
};

TEST_F(CorruptCorpus, EveryFileLoadsToAClearError) {
  const std::vector<CorruptFile> files = corpus(real_);
  ASSERT_GE(files.size(), 50u);
  const std::string dir = test::temp_dir();
  int clean = 0;
  for (const CorruptFile& f : files) {
    const std::string path = dir + "/" + f.name + ".gguf";
    test::write_file(path, f.bytes);
    try {
      load_model(path);
      ADD_FAILURE() << f.name << ": loaded without error";
    } catch (const Error& e) {
      const bool names_file = std::string(e.what()).find(path) != std::string::npos;
      EXPECT_TRUE(names_file) << f.name << ": " << e.what();
      clean += names_file;
    }
    std::filesystem::remove(path);
  }
  EXPECT_EQ(clean, (int)files.size());
  std::printf("[ corpus   ] %zu corrupted files, %d clean errors\n", files.size(), clean);
}

// NaN or Inf in the weights: a warning at load where it is cheap to see (norm vectors), and an
// error from the forward pass, never silently NaN text.
TEST_F(CorruptCorpus, NonFiniteWeightsWarnAndFailTheForwardPass) {
  const GgufLayout l = walk(real_);
  for (const char* tensor : {"output_norm.weight", "blk.2.attn_q.weight"}) {
    auto t = std::find_if(l.tensors.begin(), l.tensors.end(), [&](const auto& x) { return x.name == tensor; });
    ASSERT_NE(t, l.tensors.end());
    const size_t at = l.data_start + u64_at(real_, t->offset_pos);
    const bool f32 = u32_at(real_, t->type_pos) == 0;
    // NaN: 0x7FC00000 as F32, 0x7E00 as F16; written over the first few elements.
    const std::string nan = f32 ? gguf_le32(0x7FC00000u) : std::string("\x00\x7E", 2);
    std::string bytes = real_;
    for (int i = 0; i < 4; ++i) bytes.replace(at + i * nan.size(), nan.size(), nan);
    const std::string path = test::temp_dir() + "/nan-" + tensor + ".gguf";
    test::write_file(path, bytes);

    testing::internal::CaptureStderr();
    auto model = load_model(path);
    const std::string warning = testing::internal::GetCapturedStderr();
    if (f32) {
      EXPECT_NE(warning.find(std::string(tensor) + "' holds NaN or Inf"), std::string::npos) << warning;
    }
    SessionOptions so;
    so.n_ctx = 8;
    Session s(*model, so);
    const int32_t tokens[] = {1, 1294, 267};
    try {
      s.prefill(tokens);
      ADD_FAILURE() << tensor << ": NaN weights gave logits";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fasa
