#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <map>

#include "fasa/error.h"

namespace fasa {

namespace {

// GPT-2's word pattern: contractions, letters, digits, other symbols, each with one optional leading
// space; runs of spaces give their last space to the next word.
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama-3 and Qwen2 (case-insensitive contractions; digits in runs of up to 3, or single digits).
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pre-tokenizer of each `tokenizer.ggml.pre` value (the values llama.cpp's converter writes).
const std::map<std::string, std::vector<std::string>>& table() {
  static const std::map<std::string, std::vector<std::string>> t = [] {
    std::map<std::string, std::vector<std::string>> m;
    for (const char* n : {"gpt-2", "phi-2", "mpt", "olmo", "jais"}) m[n] = {kGpt2};
    for (const char* n : {"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe"}) m[n] = {kLlama3};
    m["qwen2"] = {kQwen2};
    for (const char* n : {"starcoder", "refact", "command-r", "smollm", "codeshell"}) m[n] = {R"(\p{N})", kGpt2};
    m["falcon"] = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    // DeepSeek-LLM: newlines alone, then cased letters, ASCII/full-width punctuation, trailing spaces, CJK, digits.
    // Code points are escaped so that no editor normalisation can change them.
    m["deepseek-llm"] = {
        "[\r\n]",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
        R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
        R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
        R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
        R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
        R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
        R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
        R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC})"
        R"(\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128})"
        R"(\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183})"
        R"(\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
        R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
        R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
        R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
        R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)",
        R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
        R"(\p{N}+)",
    };
    m["deepseek-coder"] = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
                           R"(\p{N})"};
    return m;
  }();
  return t;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::vector<std::string> patterns, const std::string& source) {
  for (const std::string& p : patterns) {
    int err = 0;
    PCRE2_SIZE at = 0;
    auto r = std::make_shared<Regex>();
    r->code = pcre2_compile((PCRE2_SPTR)p.data(), p.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                            &at, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(source, "pre-tokenizer regex '" + p + "' does not compile at offset " + std::to_string(at) + ": " +
                       (const char*)msg);
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // optional speed-up; matching works without it
    regexes_.push_back(std::move(r));
  }
}

PreTokenizer PreTokenizer::for_name(const std::string& pre, const std::string& source) {
  auto it = table().find(pre);
  if (it == table().end()) {
    std::string names;
    for (auto& n : supported_names()) names += (names.empty() ? "" : ", ") + n;
    fail(source, "pre-tokenizer '" + pre + "' (tokenizer.ggml.pre) is not supported (supported: " + names + ")");
  }
  return PreTokenizer(it->second, source);
}

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> names;
  for (auto& [n, _] : table()) names.push_back(n);
  return names;
}

const std::string& PreTokenizer::gpt2_pattern() { return kGpt2; }

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces{text};
  if (text.empty()) return {};
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(pcre2_match_data_create(1, nullptr),
                                                                         &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  for (const auto& re : regexes_) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) {
      size_t gap = 0, pos = 0;  // each piece is its own subject, so lookarounds and $ stop at its ends
      while (pos < piece.size()) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)piece.data(), piece.size(), pos, 0, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;  // the rest is one gap
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw Error(std::string("pre-tokenizer: regex matching failed: ") + (const char*)msg);
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        size_t b = ov[0], e = ov[1];
        if (e == b) {  // an empty match splits nothing; step past one character
          pos = b + 1;
          while (pos < piece.size() && ((uint8_t)piece[pos] & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (b > gap) next.push_back(piece.substr(gap, b - gap));
        next.push_back(piece.substr(b, e - b));
        gap = pos = e;
      }
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace fasa
