// Tokenizers: the golden ids of kjv-tiny, byte fallback, agreement with libsentencepiece on the HF
// tokenizer.model, llama.cpp's test vectors for every vocabulary in ../shared/tokenizers (SentencePiece and
// byte-level BPE, from GGUF and from tokenizer.json), and the Llama-3/Qwen2 pre-tokenizer splits.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sentencepiece_processor.h>

#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/pretokenizer.h"
#include "fasa/error.h"
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
struct VectorCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VectorCase> read_vectors(const std::string& base) {
  const std::string inp = test::read_file(base + ".inp"), out = test::read_file(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VectorCase> cases;
  for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    cases.push_back({inp.substr(pos, next - pos), {}});
  std::istringstream lines(out);
  size_t i = 0;
  for (std::string line; std::getline(lines, line); ++i) {
    if (i >= cases.size()) break;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
  }
  EXPECT_EQ(i, cases.size()) << base << ": inputs and outputs differ in count";
  return cases;
}

Tokenizer vocabulary_tokenizer(const std::string& path) {
  GgufFile f(path);
  return Tokenizer::from_gguf(f, (int)f.get_string_array("tokenizer.ggml.tokens").size());
}

void expect_vectors(const Tokenizer& tok, const std::string& base, bool lossless) {
  const auto cases = read_vectors(base);
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    EXPECT_EQ(tok.encode(c.text, false), c.ids) << base << " input: '" << c.text << "'";
    if (lossless) {
      EXPECT_EQ(tok.decode(c.ids), c.text) << base;
    }
  }
}

class Vocabulary : public ::testing::TestWithParam<std::string> {};

TEST_P(Vocabulary, TestVectors) {
  FASA_REQUIRE_SHARED();
  const std::string base = test::shared_dir() + "/tokenizers/" + GetParam();
  Tokenizer tok = vocabulary_tokenizer(base);
  // Byte-level BPE spells every byte, so decoding gives the text back exactly.
  expect_vectors(tok, base, tok.describe().rfind("byte-level", 0) == 0);
}

INSTANTIATE_TEST_SUITE_P(Files, Vocabulary,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-gpt-2.gguf",
                                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf",
                                           "ggml-vocab-starcoder.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(11, info.param.size() - 16);  // ggml-vocab-X.gguf
                           for (auto& c : n)
                             if (!isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

// The same vocabularies written as Hugging Face tokenizer.json files go through the same engine.
TEST(Tokenizer, TokenizerJsonMatchesTheGgufVocabulary) {
  FASA_REQUIRE_SHARED();
  for (const std::string name : {"gpt-2", "starcoder"}) {
    const std::string base = test::shared_dir() + "/tokenizers/ggml-vocab-" + name + ".gguf";
    GgufFile f(base);
    const auto pieces = f.get_string_array("tokenizer.ggml.tokens");
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    nlohmann::json j, vocab = nlohmann::json::object(), added = nlohmann::json::array();
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (types[i] == (int)TokenType::Control) added.push_back({{"id", i}, {"content", pieces[i]}, {"special", true}});
      else vocab[pieces[i]] = i;
    }
    auto merges = f.get_string_array("tokenizer.ggml.merges");
    nlohmann::json steps = nlohmann::json::array();
    if (name == "starcoder")
      steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}"}}}, {"behavior", "Isolated"}, {"invert", false}});
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
    j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
    j["added_tokens"] = added;
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
    const std::string dir = test::temp_dir();
    std::ofstream(dir + "/tokenizer.json") << j.dump();
    Tokenizer tok = Tokenizer::from_tokenizer_json(dir + "/tokenizer.json", dir + "/none.json", (int)pieces.size() + 7);
    expect_vectors(tok, base, true);
  }
}

TEST(Tokenizer, ByteLevelBpeRoundTripsArbitraryBytes) {
  FASA_REQUIRE_SHARED();
  Tokenizer tok = vocabulary_tokenizer(test::shared_dir() + "/tokenizers/ggml-vocab-gpt-2.gguf");
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    std::string text(rng() % 40, '\0');
    for (auto& c : text) c = (char)(rng() % 256);  // invalid UTF-8 included
    EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
  }
  // Control tokens are never produced from plain text.
  for (int32_t id : tok.encode("<|endoftext|> hello", false)) EXPECT_NE(tok.type(id), TokenType::Control);
}

TEST(Tokenizer, UnknownPreTokenizerIsAClearError) {
  try {
    PreTokenizer::for_name("no-such-pre", "model.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.gguf"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos);  // lists what is supported
  }
}

// Llama-3 and Qwen2 vocabularies are not in ../shared; their pre-tokenizers split as the HF regexes do.
TEST(PreTokenizer, Llama3AndQwen2Splits) {
  auto words = [](const char* pre, std::string_view text) {
    std::vector<std::string> out;
    for (auto w : PreTokenizer::for_name(pre, "test").split(text)) out.emplace_back(w);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(words("llama-bpe", "I'LL pay 12345 now!!\n\n  ok"),
            (V{"I", "'LL", " pay", " ", "123", "45", " now", "!!\n\n", " ", " ok"}));
  EXPECT_EQ(words("qwen2", "x 2024 y"), (V{"x", " ", "2", "0", "2", "4", " y"}));
  EXPECT_EQ(words("gpt-2", "Hello   world"), (V{"Hello", "  ", " world"}));
  EXPECT_EQ(words("gpt-2", ""), V{});
}

}  // namespace
}  // namespace fasa
