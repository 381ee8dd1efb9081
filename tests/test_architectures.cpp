// Architecture specifics beyond plain Llama, on small random-weight GGUFs: qwen2's Q/K/V biases,
// qwen3's per-head Q/K RMSNorm (which makes attention blind to the scale of W_q and W_k); phi3,
// qwen3moe and gemma3 against llama.cpp's own outputs on the same file; gemma3's sliding-window caches.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/synthetic_model.h"
#include "fasa/fasa.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/session.h"
#include "sparse/policy.h"
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
  s.prefill(tokens, &all);
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

// Each row of the architecture table: a small model written with the row's tensors (make-model's writer
// reads the same row) loads as that row, with its switches on, and decodes to finite logits; its HF
// model types find it. A new row is walked here without a line of this test changing.
TEST(Architectures, EveryRowOfTheTableLoadsAndDecodes) {
  for (const Architecture& a : architectures()) {
    SCOPED_TRACE(a.name);
    EXPECT_EQ(find_gguf_architecture(a.name), &a);
    for (const char* type : a.hf_model_types) EXPECT_EQ(find_hf_architecture(type), &a) << type;
    ModelShape shape{"tiny", a.name, 6, 64, 4, 2, 96, 300, 256, 10000.0f, 0.0f, false};
    if (a.needs_experts) shape.n_expert = 4, shape.n_expert_used = 2, shape.n_ff_exp = 32;
    if (a.gemma_blocks) shape.sliding_window = 8;
    const std::string path = test::temp_dir() + "/" + a.name + ".gguf";
    write_synthetic_model(shape, DType::F32, path, 3);
    auto model = load_model(path);
    const ModelConfig& c = model->config;
    EXPECT_EQ(c.arch, a.name);
    EXPECT_EQ(c.rope_layout, a.gguf_rope);
    EXPECT_EQ(c.qkv_bias, a.qkv_bias);
    EXPECT_EQ(c.qk_norm, a.qk_norm);
    EXPECT_EQ(c.post_norms, a.gemma_blocks);
    EXPECT_EQ(c.n_global_layers(), a.gemma_blocks ? 1 : 6);
    EXPECT_EQ(c.n_expert > 0, a.needs_experts);
    Session s(*model, {});
    const std::vector<int32_t> prompt = {1, 40, 41, 42, 100, 7, 200, 33};
    std::vector<float> logits;  // [8][n_vocab]
    s.prefill(prompt, &logits);
    ASSERT_EQ(logits.size(), 8u * c.n_vocab);
    EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
  }
  EXPECT_EQ(find_gguf_architecture("mamba"), nullptr);
  EXPECT_EQ(find_hf_architecture("gpt_neox"), nullptr);
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
    for (const char* s : {"mamba", "llama", "qwen2", "qwen3", "phi3", path.c_str()}) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
}

// Greedy decoding from `prompt`: the tokens and the logits before each.   logits: [n][n_vocab]
std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, int n, std::vector<std::vector<float>>& logits) {
  std::vector<int32_t> out;
  std::span<const float> l = s.prefill(prompt);
  for (int i = 0; i < n; ++i) {
    logits.emplace_back(l.begin(), l.end());
    out.push_back((int32_t)(std::max_element(l.begin(), l.end()) - l.begin()));
    l = s.decode(out.back());
  }
  return out;
}

// `fasa make-model --shape NAME` (F32, seed 1), as tools/arch-references/make.py ran llama.cpp on it:
// the same greedy tokens, logits within rounding at every step; and FASA with a budget covering the context equal to
// full attention (within the rounding of its other summation order).
void expect_llama_cpp_outputs(const std::string& shape, double fasa_tolerance = 1e-5, const SessionOptions& so = {}) {
  std::ifstream in(std::string(FASA_SOURCE_DIR) + "/tests/golden/arch/" + shape + ".json");
  ASSERT_TRUE(in) << shape << ": no reference";
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::string path = test::temp_dir() + "/" + shape + ".gguf";
  write_synthetic_model(find_model_shape(shape), DType::F32, path, 1);
  auto model = load_model(path);
  const auto prompt = ref["prompt"].get<std::vector<int32_t>>();
  const auto want = ref["tokens"].get<std::vector<int32_t>>();
  Session full(*model, so);
  std::vector<std::vector<float>> logits;
  EXPECT_EQ(greedy(full, prompt, (int)want.size(), logits), want) << shape;
  ASSERT_EQ(ref["logits"].size(), want.size()) << shape << ": the reference keeps the logits of every step";
  for (const auto& [step, values] : ref["logits"].items()) {
    const auto theirs = values.get<std::vector<float>>();
    const auto& ours = logits.at(std::stoul(step));
    ASSERT_EQ(ours.size(), theirs.size());
    // llama.cpp's CPU attention rounds the queries to F16 (as both round K and V): ~7e-4 apart
    EXPECT_LE(test::normalized_error(ours.data(), theirs.data(), ours.size()), 2e-3) << shape << " step " << step;
  }
  PolicyOptions o;
  o.attn = "fasa";
  o.synthetic_profile = true;
  o.budget = Budget::count(100000);
  o.dense_layers = {};
  Session sparse(*model, so, make_policy(o, *model, nullptr));
  std::vector<std::vector<float>> sparse_logits;
  EXPECT_EQ(greedy(sparse, prompt, (int)want.size(), sparse_logits), want) << shape << " fasa";
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_LE(test::normalized_error(sparse_logits[i].data(), logits[i].data(), logits[i].size()), fasa_tolerance)
        << shape << " fasa step " << i;
}

TEST(Architectures, Phi3EqualsLlamaCpp) { expect_llama_cpp_outputs("phi3-tiny"); }

// (3e-5: the router's softmax and renormalisation pass that rounding on to the experts' weights)
TEST(Architectures, Qwen3MoeEqualsLlamaCpp) { expect_llama_cpp_outputs("qwen3moe-tiny", 3e-5); }

// Five sliding layers (window 16) of six: the 36 positions outgrow the window.
TEST(Architectures, Gemma3EqualsLlamaCpp) { expect_llama_cpp_outputs("gemma3-tiny"); }

// A ubatch of 4 and no rewind leave the sliding layers' caches a ring of 19 positions: prefill
// chunks and decode steps wrap around it many times.
TEST(Architectures, Gemma3EqualsLlamaCppWithTheSlidingCachesInSmallRings) {
  SessionOptions so;
  so.n_ubatch = 4;
  so.n_rewind = 0;
  expect_llama_cpp_outputs("gemma3-tiny", 1e-5, so);
}

// A sliding layer's ring keeps the window plus the rewind: truncating within it keeps the positions
// (and decodes on exactly as before); beyond it the session starts again from 0, and a Context feeds
// what was dropped again, so it goes on exactly as a fresh one.
TEST(Architectures, Gemma3TruncateBeyondTheRingStartsAgainAndAContextFeedsTheRest) {
  const std::string path = test::temp_dir() + "/gemma3.gguf";
  write_synthetic_model(find_model_shape("gemma3-tiny"), DType::F32, path, 2);
  auto model = load_model(path);
  std::vector<int32_t> tokens(300);
  for (int i = 0; i < 300; ++i) tokens[i] = 3 + (i * 37) % 1000;
  SessionOptions so;
  so.n_ubatch = 4;
  so.n_rewind = 6;  // ring: 15 + 6 positions
  Session s(*model, so);
  const std::vector<int32_t> first(tokens.begin(), tokens.begin() + 30);
  const std::span<const float> logits = s.prefill(first);
  const std::vector<float> want(logits.begin(), logits.end());
  ASSERT_EQ(s.truncate(24), 24);  // 6 back
  const std::vector<int32_t> again(tokens.begin() + 24, tokens.begin() + 30);
  const std::span<const float> got = s.prefill(again);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), want);
  EXPECT_EQ(s.truncate(8), 0);  // the ring lost positions 8 still needs

  Engine engine(path);
  ContextOptions co;
  co.n_ctx = 512;
  GenerationOptions go;
  go.max_tokens = 6;
  go.logprobs = 0;
  go.ignore_eos = true;
  Context reused(engine, co), fresh(engine, co);
  reused.feed_tokens(tokens);  // 300 positions: far past the ring (15 + the ubatch)
  reused.truncate(10);
  reused.feed_tokens({7, 8, 9});
  fresh.feed_tokens(std::vector<int32_t>(tokens.begin(), tokens.begin() + 10));
  fresh.feed_tokens({7, 8, 9});
  const GenerationResult a = reused.generate(go), b = fresh.generate(go);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_EQ(a.logprobs[i].logprob, b.logprobs[i].logprob) << i;
}

TEST(Architectures, Phi3LongRopeIsRefusedByName) {
  test::TinyLlamaSpec spec;
  spec.arch = "phi3";
  spec.extra_tensor = "rope_factors_long.weight";
  const std::string path = test::temp_dir() + "/p.gguf";
  test::write_file(path, test::tiny_llama_gguf(spec).bytes());
  EXPECT_THROW(
      try { load_model(path); } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("LongRoPE"), std::string::npos) << e.what();
        throw;
      },
      Error);
}

}  // namespace
}  // namespace fasa
