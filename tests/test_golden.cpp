// Golden logits: every case of kjv-tiny's golden.json on every file it lists (f32/f16 GGUF, BF16/F32
// HF), greedy continuations, the two RoPE layouts agreeing, and the random-weight qwen2/llama3 models.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/sampler.h"
#include "model/session.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

std::vector<float> read_f32(const std::string& path) {
  const std::string b = test::read_file(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

struct GoldenCase {
  std::string model;       // file or directory, relative to the golden.json's model folder
  std::string golden_dir;  // folder holding golden.json
  size_t index;            // case index
  double tol;
};
void PrintTo(const GoldenCase& g, std::ostream* os) { *os << g.golden_dir << "/" << g.model << " case " << g.index; }

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  const std::string shared = test::shared_dir();
  if (shared.empty()) return out;
  const std::string kjv = shared + "/models/kjv-tiny";
  auto j = nlohmann::json::parse(test::read_file(kjv + "/golden/golden.json"));
  for (size_t i = 0; i < j["cases"].size(); ++i)
    for (auto& f : j["cases"][i]["files"])
      out.push_back({f.get<std::string>(), kjv, i, j["cases"][i]["variant"] == "f32" ? 1e-4 : 2e-3});
  for (const char* m : {"qwen2-rand", "llama3-rand"}) {
    const std::string d = shared + "/models/" + m;
    for (size_t i = 0; i < 2; ++i) {
      out.push_back({std::string(m) + "-f32.gguf", d, i, 1e-4});
      out.push_back({"hf", d, i, 1e-4});
    }
  }
  return out;
}

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, LogitsOfEveryPositionAndGreedyContinuation) {
  const GoldenCase& g = GetParam();
  auto j = nlohmann::json::parse(test::read_file(g.golden_dir + "/golden/golden.json"));
  const auto& c = j["cases"][g.index];
  auto model = load_model(g.golden_dir + "/" + g.model);
  const std::vector<int32_t> tokens = c["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(model->tokenizer.encode(c["text"].get<std::string>(), true), tokens);

  const auto ref = read_f32(g.golden_dir + "/" + c["logits"].get<std::string>());
  const size_t V = model->config.n_vocab;
  // The references are float32 runs: an F32 cache meets the case's tolerance; the default F16 cache
  // adds its rounding of keys, values and queries (measured up to 1.2e-3) and must keep the greedy tokens.
  for (auto [kv_type, tol] : {std::pair{DType::F32, g.tol}, std::pair{DType::F16, g.tol + 4e-3}}) {
    SCOPED_TRACE(dtype_name(kv_type));
    SessionOptions o;
    o.cache.types = {kv_type, kv_type};
    Session s(*model, o);
    std::vector<float> logits;
    s.prefill(tokens, &logits);
    ASSERT_EQ(logits.size(), ref.size());
    for (size_t t = 0; t < tokens.size(); ++t)
      EXPECT_LE(test::normalized_error(&logits[t * V], &ref[t * V], V), tol) << "position " << t;

    if (!c.contains("greedy_next_24")) continue;
    std::vector<int32_t> got;
    std::span<const float> last(logits.end() - V, logits.end());
    for (int i = 0; i < 24; ++i) {
      const int32_t next = argmax(last);
      got.push_back(next);
      last = s.decode(next);
    }
    EXPECT_EQ(got, c["greedy_next_24"].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(golden_cases()), [](const auto& info) {
  std::string n = std::filesystem::path(info.param.golden_dir).filename().string() + "_" + info.param.model + "_" +
                  std::to_string(info.param.index);
  for (auto& ch : n)
    if (!isalnum((unsigned char)ch)) ch = '_';
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

TEST(Golden, SharedModelsPresentOrSkipped) { FASA_REQUIRE_SHARED(); }

// NORMAL layout with permuted Q/K rows (GGUF) and NEOX with HF rows compute the same function.
TEST(Golden, GgufAndHfLayoutsGiveTheSameLogits) {
  FASA_REQUIRE_SHARED();
  const std::string kjv = test::shared_dir() + "/models/kjv-tiny";
  auto gguf = load_model(kjv + "/kjv-tiny-f32.gguf");
  auto hf = load_model(kjv + "/hf-f32");
  EXPECT_EQ(gguf->config.rope_layout, RopeLayout::Normal);
  EXPECT_EQ(hf->config.rope_layout, RopeLayout::Neox);
  auto tokens = gguf->tokenizer.encode("And God said, Let there be light: and there was light.", true);
  SessionOptions exact;  // F16 rounding of keys and queries would amplify the layouts' last-bit differences
  exact.cache.types = {DType::F32, DType::F32};
  Session a(*gguf, exact), b(*hf, exact);
  std::vector<float> la, lb;
  a.prefill(tokens, &la);
  b.prefill(tokens, &lb);
  EXPECT_LE(test::normalized_error(la.data(), lb.data(), la.size()), 1e-5);
}

// Prefill in several chunks and token-by-token decoding give the logits one batched pass gives.
TEST(Golden, ChunkedPrefillAndDecodeMatchOneBatch) {
  auto model = load_model(FASA_BUNDLED_MODEL);
  auto tokens = model->tokenizer.encode("Water \\Wa\"ter\\, n. The fluid which descends from the clouds.", true);
  SessionOptions exact;  // F16 rounding of keys and queries would amplify the batching's last-bit differences
  exact.cache.types = {DType::F32, DType::F32};
  Session one(*model, exact);
  std::vector<float> all;
  one.prefill(tokens, &all);
  SessionOptions small = exact;
  small.n_ubatch = 5;
  Session chunked(*model, small), stepwise(*model, exact);
  std::vector<float> all_chunked;
  chunked.prefill(tokens, &all_chunked);
  EXPECT_LE(test::normalized_error(all_chunked.data(), all.data(), all.size()), 1e-5);
  const size_t V = model->config.n_vocab;
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto l = stepwise.decode(tokens[t]);
    EXPECT_LE(test::normalized_error(l.data(), &all[t * V], V), 1e-5) << "position " << t;
  }
}

TEST(Golden, ContextOverflowIsAnError) {
  auto model = load_model(FASA_BUNDLED_MODEL);
  SessionOptions o;
  o.n_ctx = 4;
  Session s(*model, o);
  std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(s.prefill(five), Error);
  std::vector<int32_t> bad = {1, 99999};
  EXPECT_THROW(s.prefill(bad), Error);
}

}  // namespace
}  // namespace fasa
