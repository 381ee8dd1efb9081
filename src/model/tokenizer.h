#pragma once
// SentencePiece-style BPE tokenizer (tokenizer.ggml.model = "llama"): merges by piece score, with
// byte fallback to <0xXX> tokens. Built from GGUF metadata or from an HF tokenizer.model.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fasa {

class GgufFile;

enum class TokenType : int32_t {
  Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

class Tokenizer {
 public:
  static Tokenizer from_gguf(const GgufFile& f, int n_vocab);
  // HF directory: `model_path` is tokenizer.model (read with libsentencepiece).
  static Tokenizer from_sentencepiece(const std::string& model_path, bool add_bos, int n_vocab);
  // Direct construction (tests, other loaders). Throws fasa::Error naming `source` on a bad vocabulary.
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::vector<TokenType> types,
            int bos, int eos, int unk, bool add_bos, bool add_space_prefix, const std::string& source);
  Tokenizer() = default;

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // Text of a sequence; drops control tokens and the space the encoder prefixed.
  std::string decode(std::span<const int32_t> ids) const;
  // Bytes one token stands for, as it continues a text ("▁" -> " ", <0x0A> -> "\n", control -> "").
  std::string token_text(int32_t id) const;

  int n_vocab() const { return (int)pieces_.size(); }
  int bos() const { return bos_; }
  int eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  const std::string& piece(int32_t id) const { return pieces_.at(id); }
  TokenType type(int32_t id) const { return types_.at(id); }

 private:
  std::vector<std::string> pieces_;  // [n_vocab]
  std::vector<float> scores_;        // [n_vocab]
  std::vector<TokenType> types_;     // [n_vocab]
  std::unordered_map<std::string, int32_t> piece_to_id_;  // mergeable pieces only
  int32_t byte_to_id_[256];
  int bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true;
  bool add_space_prefix_ = true;
};

}  // namespace fasa
