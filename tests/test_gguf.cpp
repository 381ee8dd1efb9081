// GGUF reader: every metadata value type, tensor infos, alignment, and the real bundled files.
#include "io/gguf.h"
#include "model/model.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

using test::GgufWriter;

TEST(Gguf, ReadsEveryMetadataTypeAndTensorInfo) {
  GgufWriter w;
  w.kv_raw("u8", 0, std::string(1, (char)200));
  w.kv_raw("i8", 1, std::string(1, (char)-5));
  uint16_t u16 = 60000;
  int16_t i16 = -30000;
  w.kv_raw("u16", 2, std::string(reinterpret_cast<char*>(&u16), 2));
  w.kv_raw("i16", 3, std::string(reinterpret_cast<char*>(&i16), 2));
  w.kv_u32("u32", 4000000000u);
  w.kv_i32("i32", -7);
  w.kv_f32("f32", 0.25f);
  w.kv_bool("bool", true);
  w.kv_string("str", "héllo");
  w.kv_u64("u64", 1ull << 40);
  w.kv_raw("i64", 11, gguf_le64((uint64_t)-99));
  double f64 = 3.5;
  w.kv_raw("f64", 12, std::string(reinterpret_cast<char*>(&f64), 8));
  w.kv_string_array("strs", {"a", "", "ccc"});
  w.kv_f32_array("floats", {1.5f, -2.0f});
  w.kv_i32_array("ints", {3, -4, 5});
  w.kv_u32("general.alignment", 64);
  w.tensor_f32("t0", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  w.tensor_f32("t1", {3}, {9, 10, 11});
  const std::string path = test::temp_dir() + "/all.gguf";
  test::write_file(path, w.bytes(3, 64));

  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -5);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("i32"), -7);
  EXPECT_EQ(f.get_float("f32", 0), 0.25);
  EXPECT_TRUE(f.get_bool("bool", false));
  EXPECT_EQ(f.get_string("str"), "héllo");
  EXPECT_EQ(f.get_int("u64"), 1LL << 40);
  EXPECT_EQ(f.get_int("i64"), -99);
  EXPECT_EQ(f.get_float("f64", 0), 3.5);
  EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_float_array("floats"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.get_int_array("ints"), (std::vector<int32_t>{3, -4, 5}));
  EXPECT_EQ(f.get_int("missing", 17), 17);
  EXPECT_THROW(f.get_int("str"), Error);       // wrong type
  EXPECT_THROW(f.get_string("missing"), Error);  // missing key
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* t1 = f.find_tensor("t1");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->ne, (std::vector<int64_t>{3}));
  EXPECT_EQ(t1->offset % 64, 0u);
  float v[3];
  std::memcpy(v, t1->data, 12);
  EXPECT_EQ(v[2], 11.0f);
}

TEST(Gguf, Version2IsAccepted) {
  GgufWriter w;
  w.kv_string("k", "v");
  const std::string path = test::temp_dir() + "/v2.gguf";
  test::write_file(path, w.bytes(2));
  EXPECT_EQ(GgufFile(path).version(), 2u);
}

TEST(Gguf, ReadsBundledModel) {
  GgufFile f(FASA_BUNDLED_MODEL);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 4);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, DType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->type, DType::F32);
  auto m = load_model(FASA_BUNDLED_MODEL);
  EXPECT_EQ(m->config.n_head, 4);
  EXPECT_EQ(m->config.n_head_kv, 2);
  EXPECT_EQ(m->config.head_dim, 64);
  EXPECT_EQ(m->config.rope_layout, RopeLayout::Normal);
  EXPECT_NEAR(m->n_params() / 1e6, 5.25, 0.01);
}

}  // namespace
}  // namespace fasa
