#pragma once
// Splits text into words before byte-level BPE, as Hugging Face's Split pre-tokenizers do: each regex in
// turn cuts every piece into its matches and the gaps between them (both kept). PCRE2 in UTF + Unicode-
// property mode does the matching; invalid UTF-8 never matches and ends up in the gaps, never dropped.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fasa {

class PreTokenizer {
 public:
  // The regexes llama.cpp's GGUF `tokenizer.ggml.pre` names stand for; an unknown name is an error
  // naming `source` and listing the supported ones.
  static PreTokenizer for_name(const std::string& pre, const std::string& source);
  static std::vector<std::string> supported_names();
  // GPT-2's own pattern (ByteLevel pre-tokenizer with use_regex in a tokenizer.json).
  static const std::string& gpt2_pattern();

  PreTokenizer(std::vector<std::string> patterns, const std::string& source);
  PreTokenizer() = default;

  std::vector<std::string_view> split(std::string_view text) const;
  bool empty() const { return regexes_.empty(); }

 private:
  struct Regex;
  std::vector<std::shared_ptr<const Regex>> regexes_;
};

}  // namespace fasa
