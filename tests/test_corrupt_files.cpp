// Malformed model files: each must give a fasa::Error naming the file and the problem — never a
// crash, a hang or a huge allocation. Derived from a valid tiny model, from the bundled real model,
// and from hand-written safetensors/config files.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/model.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

using test::GgufWriter;
using test::TinyLlamaSpec;

struct Case {
  std::string name;
  std::function<std::string()> bytes;  // file contents
  std::string expect;                  // substring of the error message
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string tiny(std::function<void(TinyLlamaSpec&)> edit = nullptr) {
  TinyLlamaSpec s;
  if (edit) edit(s);
  return test::tiny_llama_gguf(s).bytes();
}

// A GGUF with one extra raw metadata entry in front of a valid tiny model's.
std::string with_raw_kv(uint32_t type, const std::string& value) {
  GgufWriter w = test::tiny_llama_gguf({});
  w.kv_raw("evil", type, value);
  return w.bytes();
}

std::string patch(std::string b, size_t at, const std::string& with) {
  b.replace(at, with.size(), with);
  return b;
}

std::string bundled() { return test::read_file(FASA_BUNDLED_MODEL); }

// Byte position of the first tensor-info entry's fields in a tiny model (for targeted patches).
size_t tensor_info_pos(const std::string& b, const std::string& name) {
  return b.find(gguf_string(name)) + 8 + name.size();  // -> n_dims
}

std::vector<Case> gguf_cases() {
  return {
      {"empty", [] { return std::string(); }, "bad magic"},
      {"bad_magic", [] { return patch(tiny(), 0, "GGML"); }, "bad magic"},
      {"version_1", [] { return patch(tiny(), 4, gguf_le32(1)); }, "unsupported GGUF version 1"},
      {"version_99", [] { return patch(tiny(), 4, gguf_le32(99)); }, "unsupported GGUF version 99"},
      {"truncated_header", [] { return tiny().substr(0, 10); }, "truncated"},
      {"bundled_truncated_in_metadata", [] { return bundled().substr(0, 5000); }, "truncated"},
      {"bundled_truncated_in_tensor_info", [] {
         std::string b = bundled();
         return b.substr(0, b.find("blk.3.attn_k.weight"));
       }, "truncated"},
      {"bundled_truncated_in_data", [] { std::string b = bundled(); return b.substr(0, b.size() - 4096); },
       "past the end of the file"},
      {"absurd_tensor_count", [] { return patch(tiny(), 8, gguf_le64(1ull << 40)); }, "tensor count"},
      {"absurd_metadata_count", [] { return patch(tiny(), 16, gguf_le64(1ull << 40)); }, "metadata count"},
      {"tensor_count_past_file", [] { return patch(tiny(), 8, gguf_le64(1000000)); }, "does not fit"},
      {"absurd_string_length", [] { return with_raw_kv(8, gguf_le64(1ull << 50)); }, "string length"},
      {"string_past_end", [] { return with_raw_kv(8, gguf_le64(1ull << 20) + "abc"); }, "truncated"},
      {"unknown_value_type", [] { return with_raw_kv(99, ""); }, "unknown value type 99"},
      {"array_count_past_end", [] { return with_raw_kv(9, gguf_le32(6) + gguf_le64(1ull << 60)); },
       "does not fit"},
      {"string_array_count_past_end", [] { return with_raw_kv(9, gguf_le32(8) + gguf_le64(1ull << 60)); },
       "does not fit"},
      {"nested_array", [] { return with_raw_kv(9, gguf_le32(9) + gguf_le64(1)); }, "nested arrays"},
      {"bool_not_0_or_1", [] { return with_raw_kv(7, std::string(1, 2)); }, "not 0 or 1"},
      {"duplicate_key", [] {
         GgufWriter w = test::tiny_llama_gguf({});
         w.kv_u32("llama.block_count", 2);
         return w.bytes();
       }, "duplicate metadata key"},
      {"alignment_not_power_of_two", [] {
         GgufWriter w = test::tiny_llama_gguf({});
         w.kv_u32("general.alignment", 48);
         return w.bytes();
       }, "not a power of two"},
      {"zero_dims", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight"), gguf_le32(0));
       }, "dimensions"},
      {"seven_dims", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight"), gguf_le32(7));
       }, "dimensions"},
      {"absurd_dimension", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 4, gguf_le64(1ull << 62));
       }, "impossible"},
      {"unknown_tensor_type", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 12, gguf_le32(77));
       }, "unknown tensor type 77"},
      {"row_not_multiple_of_block", [] {
         std::string b = tiny();  // output_norm is [32]: as Q8_0 fine, as K-quant (256) not
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 12, gguf_le32(12));
       }, "block size"},
      {"misaligned_offset", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 16, gguf_le64(4));
       }, "not aligned"},
      {"offset_past_end", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 16, gguf_le64(1ull << 40));
       }, "past the end of the file"},
      {"overlapping_tensors", [] {
         std::string b = tiny();
         return patch(b, tensor_info_pos(b, "output_norm.weight") + 16, gguf_le64(0));
       }, "overlap"},
      {"missing_tensor", [] { return tiny([](auto& s) { s.skip_tensor = "blk.1.ffn_up.weight"; }); },
       "missing tensor 'blk.1.ffn_up.weight'"},
      {"misshaped_tensor", [] { return tiny([](auto& s) { s.misshape_tensor = "blk.0.attn_k.weight"; }); },
       "tensor 'blk.0.attn_k.weight' has shape"},
      {"kv_heads_do_not_divide_heads", [] { return tiny([](auto& s) { s.n_head_kv = 3; }); }, "KV head count 3"},
      {"zero_heads", [] {
         GgufWriter w = test::tiny_llama_gguf({});
         std::string b = w.bytes();
         const std::string key = gguf_string("llama.attention.head_count");
         return patch(b, b.find(key) + key.size() + 4, gguf_le32(0));
       }, "head count 0"},
      {"absurd_layer_count", [] {
         std::string b = tiny();
         const std::string key = gguf_string("llama.block_count");
         return patch(b, b.find(key) + key.size() + 4, gguf_le32(1u << 31));
       }, "out of range"},
      {"unsupported_architecture", [] { return tiny([](auto& s) { s.arch = "mamba"; }); },
       "architecture 'mamba' is not supported"},
      {"unsupported_tokenizer", [] { return tiny([](auto& s) { s.tokenizer_model = "rwkv"; }); },
       "tokenizer model 'rwkv' is not supported"},
  };
}

class CorruptGguf : public ::testing::TestWithParam<Case> {};

TEST_P(CorruptGguf, LoadFailsWithAClearError) {
  const Case& c = GetParam();
  if (c.name.rfind("bundled", 0) == 0 && !std::filesystem::exists(FASA_BUNDLED_MODEL))
    GTEST_SKIP() << "bundled model missing";
  const std::string path = test::temp_dir() + "/" + c.name + ".gguf";
  test::write_file(path, c.bytes());
  try {
    load_model(path);
    FAIL() << c.name << ": loaded without error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "error does not name the file: " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, CorruptGguf, ::testing::ValuesIn(gguf_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CorruptGguf, EveryTruncationOfATinyModelFailsCleanly) {
  const std::string b = tiny();
  const std::string path = test::temp_dir() + "/trunc.gguf";
  for (size_t n = 0; n < b.size(); n += 7) {
    test::write_file(path, b.substr(0, n));
    EXPECT_THROW(load_model(path), Error) << "truncated at " << n;
  }
}

// --- safetensors and config.json ---

std::string safetensors_bytes(const nlohmann::json& header, const std::string& data) {
  std::string h = header.dump();
  return gguf_le64(h.size()) + h + data;
}

TEST(CorruptSafetensors, EachProblemIsNamed) {
  const std::string dir = test::temp_dir();
  const std::string good_data(16, '\0');
  const nlohmann::json good = {{"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}}};
  struct S { std::string name, bytes, expect; };
  std::vector<S> cases = {
      {"short", "abc", "no safetensors header length"},
      {"header_too_long", gguf_le64(1ull << 40) + "{}", "exceeds the file"},
      {"not_json", gguf_le64(5) + "{nope", "not valid JSON"},
      {"not_object", safetensors_bytes(nlohmann::json::array({1, 2}), ""), "not a JSON object"},
      {"past_end", safetensors_bytes(good, std::string(8, '\0')), "runs past the end"},
      {"size_mismatch", safetensors_bytes({{"w", {{"dtype", "F32"}, {"shape", {3, 2}}, {"data_offsets", {0, 16}}}}},
                                          good_data), "its shape needs"},
      {"bad_dtype", safetensors_bytes({{"w", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {0, 16}}}}},
                                      good_data), "dtype I64 is not supported"},
      {"negative_offset", safetensors_bytes({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {-8, 0}}}}},
                                            good_data), "non-negative"},
      {"malformed_entry", safetensors_bytes({{"w", {{"dtype", "F32"}}}}, good_data), "malformed header entry"},
      {"overlap", safetensors_bytes({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                                     {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}},
                                    good_data), "overlap"},
  };
  for (auto& c : cases) {
    const std::string path = dir + "/" + c.name + ".safetensors";
    test::write_file(path, c.bytes);
    const std::string msg = test::error_message([&] { SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
  }
  const std::string ok = dir + "/ok.safetensors";
  test::write_file(ok, safetensors_bytes(good, good_data));
  EXPECT_EQ(SafetensorsFile(ok).tensors().size(), 1u);
}

TEST(CorruptHfDirectory, ConfigAndIndexProblemsAreNamed) {
  namespace fs = std::filesystem;
  auto hf_dir = [](const std::string& config, const std::string& index = "") {
    const std::string d = test::temp_dir();
    test::write_file(d + "/config.json", config);
    if (!index.empty()) test::write_file(d + "/model.safetensors.index.json", index);
    return d;
  };
  const std::string good_cfg = R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,
      "intermediate_size":16,"num_attention_heads":2,"vocab_size":10})";
  struct S { std::string dir, expect; };
  std::vector<S> cases = {
      {hf_dir("{ not json"), "not valid JSON"},
      {hf_dir(R"({"model_type":"gpt_neox"})"), "model_type 'gpt_neox' is not supported"},
      {hf_dir(R"({"model_type":"llama","hidden_size":8})"), "missing field 'num_hidden_layers'"},
      {hf_dir(R"({"model_type":"llama","num_hidden_layers":"six","hidden_size":8})"), "not an integer"},
      // Found by fuzz_hf: a field of another JSON type than the loader reads.
      {hf_dir(R"({"model_type":5})"), "unexpected JSON content"},
      {hf_dir(good_cfg.substr(0, good_cfg.size() - 1) + R"(,"rope_scaling":{"rope_type":[1]}})"), "unexpected JSON content"},
      {hf_dir(R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"intermediate_size":16,
          "num_attention_heads":3,"num_key_value_heads":2,"vocab_size":10})"), "KV head count"},
      {hf_dir(good_cfg), "no model.safetensors"},
      {hf_dir(good_cfg, R"({"weight_map":{"a":"missing-00001.safetensors"}})"), "cannot open"},
      {hf_dir(good_cfg, R"({"weight_map":{"a":"../../etc/passwd"}})"), "not a plain file name"},
      {hf_dir(good_cfg, R"({"weights":{}})"), "no 'weight_map'"},
  };
  for (auto& c : cases) {
    const std::string msg = test::error_message([&] { load_model(c.dir); });
    EXPECT_NE(msg.find(c.dir), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << msg;
  }
}

}  // namespace
}  // namespace fasa
