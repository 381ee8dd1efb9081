// Architecture specifics beyond plain Llama, on small random-weight GGUFs: qwen2's Q/K/V biases and
// qwen3's per-head Q/K RMSNorm (which makes attention blind to the scale of W_q and W_k).
#include "model/model.h"
#include "model/session.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

std::vector<float> logits_of(const test::TinyLlamaSpec& spec) {
  const std::string path = test::temp_dir() + "/model.gguf";
  test::write_file(path, test::tiny_llama_gguf(spec).bytes());
  auto model = load_model(path);
  Session s(*model, {});
  std::vector<float> all;
  const std::vector<int32_t> tokens = {1, 40, 41, 42, 100, 7, 200, 33};
  s.eval(tokens, &all);
  return all;
}

double scaled_weight_change(const std::string& arch, const std::string& tensor) {
  test::TinyLlamaSpec spec;
  spec.arch = arch;
  const auto base = logits_of(spec);
  spec.scale_tensor = tensor;
  spec.scale = 4.0f;
  const auto scaled = logits_of(spec);
  return test::normalized_error(scaled.data(), base.data(), base.size());
}

TEST(Architectures, Qwen3QkNormCancelsTheScaleOfQAndK) {
  for (const char* t : {"blk.0.attn_q.weight", "blk.1.attn_k.weight"}) {
    EXPECT_LT(scaled_weight_change("qwen3", t), 1e-4) << t;
    EXPECT_GT(scaled_weight_change("llama", t), 1e-2) << t;  // without the norm the scale matters
  }
  // The norm weights themselves are used: scaling them changes the attention.
  EXPECT_GT(scaled_weight_change("qwen3", "blk.0.attn_q_norm.weight"), 1e-2);
}

TEST(Architectures, Qwen2BiasesAreApplied) {
  EXPECT_GT(scaled_weight_change("qwen2", "blk.0.attn_v.bias"), 1e-2);
  EXPECT_GT(scaled_weight_change("qwen2", "blk.0.attn_k.bias"), 1e-3);
}

TEST(Architectures, Qwen3InfoCountsTheNormWeights) {
  test::TinyLlamaSpec spec;
  const std::string dir = test::temp_dir();
  test::write_file(dir + "/l.gguf", test::tiny_llama_gguf(spec).bytes());
  spec.arch = "qwen3";
  test::write_file(dir + "/q.gguf", test::tiny_llama_gguf(spec).bytes());
  auto llama = load_model(dir + "/l.gguf"), qwen3 = load_model(dir + "/q.gguf");
  EXPECT_TRUE(qwen3->config.qk_norm);
  EXPECT_EQ(qwen3->config.rope_layout, RopeLayout::Neox);
  EXPECT_EQ(qwen3->n_params() - llama->n_params(), 2LL * spec.n_layer * (spec.n_embd / spec.n_head));
}

TEST(Architectures, UnsupportedArchitectureListsTheSupportedOnes) {
  test::TinyLlamaSpec spec;
  spec.arch = "mamba";
  const std::string path = test::temp_dir() + "/m.gguf";
  test::write_file(path, test::tiny_llama_gguf(spec).bytes());
  try {
    load_model(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* s : {"mamba", "llama", "qwen2", "qwen3", path.c_str()}) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fasa
