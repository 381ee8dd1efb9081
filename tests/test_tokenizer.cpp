// SentencePiece tokenizer: the golden ids of kjv-tiny, byte fallback, round-trip decode, agreement
// with libsentencepiece on the HF tokenizer.model, and llama.cpp's Llama-2 SPM test vectors.
#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "io/gguf.h"
#include "model/model.h"
#include "test_util.h"

namespace fasa {
namespace {

TEST(Tokenizer, GoldenIdsAndRoundTrip) {
  FASA_REQUIRE_SHARED();
  auto j = nlohmann::json::parse(test::read_file(test::shared_dir() + "/models/kjv-tiny/golden/tokenizer.json"));
  for (const char* path : {"/models/kjv-tiny/kjv-tiny-f16.gguf", "/models/kjv-tiny/hf"}) {
    auto m = load_model(test::shared_dir() + path);
    for (auto& c : j["cases"]) {
      const std::string text = c["text"];
      const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(m->tokenizer.encode(text, false), want) << path << ": " << text;
      EXPECT_EQ(m->tokenizer.decode(want), text) << path;
    }
  }
}

TEST(Tokenizer, AddsBosAndDropsControlTokensInDecode) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  auto ids = m->tokenizer.encode("In the beginning", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(m->tokenizer.decode(ids), "In the beginning");
  EXPECT_EQ(m->tokenizer.encode("", true), std::vector<int32_t>{1});
  EXPECT_EQ(m->tokenizer.token_text(13), "\n");  // <0x0A>
}

TEST(Tokenizer, AgreesWithLibSentencepieceOnRandomText) {
  FASA_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/models/kjv-tiny/hf";
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(dir + "/tokenizer.model").ok());
  auto m = load_model(dir);
  const std::vector<std::string> alphabet = {"a", "e", "th", " ", "  ", "\n", "LORD", "0", "7", "é", "中",
                                             "😀", ",", ".", "\t", "unto", "Q", "z", "ing", "—"};
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int len = (int)(rng() % 12);
    for (int k = 0; k < len; ++k) text += alphabet[rng() % alphabet.size()];
    std::vector<int> ref;
    sp.Encode(text, &ref).IgnoreError();
    auto got = m->tokenizer.encode(text, false);
    ASSERT_EQ(std::vector<int>(got.begin(), got.end()), ref) << "text: '" << text << "'";
  }
}

// llama.cpp's tokenizer test vectors: inputs split by __ggml_vocab_test__, one line of ids each.
class SpmVocabulary : public ::testing::TestWithParam<std::string> {};

TEST_P(SpmVocabulary, TestVectors) {
  FASA_REQUIRE_SHARED();
  const std::string base = test::shared_dir() + "/tokenizers/" + GetParam();
  GgufFile f(base);
  Tokenizer tok = Tokenizer::from_gguf(f, (int)f.get_string_array("tokenizer.ggml.tokens").size());
  const std::string inp = test::read_file(base + ".inp"), out = test::read_file(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (true) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    expected.push_back(v);
  }
  ASSERT_EQ(inputs.size(), expected.size());
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(tok.encode(inputs[i], false), expected[i]) << "input: '" << inputs[i] << "'";
}

INSTANTIATE_TEST_SUITE_P(Files, SpmVocabulary, ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(11, info.param.size() - 16);  // ggml-vocab-X.gguf
                           for (auto& c : n)
                             if (!isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace fasa
