#pragma once
// Tokenizers of the models users bring, one class for both kinds:
// - SentencePiece BPE (GGUF tokenizer.ggml.model = "llama", or tokenizer.model): merges by piece score,
//   spaces as '▁', byte fallback to <0xXX> tokens;
// - byte-level BPE (GGUF "gpt2", or a tokenizer.json BPE model): a regex pre-tokenizer splits the text
//   into words, each word's bytes are spelled as GPT-2's printable characters and merged by rank.
// User-defined tokens are matched in the text first; control tokens never come out of plain text.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace fasa {

class GgufFile;

enum class TokenType : int32_t {
  Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

enum class TokenizerKind { SentencePiece, ByteLevelBpe };

// Everything a tokenizer file says, before validation.
struct Vocabulary {
  TokenizerKind kind = TokenizerKind::SentencePiece;
  std::vector<std::string> pieces;  // [n_vocab]
  std::vector<float> scores;        // [n_vocab] SentencePiece merge priority (empty: all 0)
  std::vector<TokenType> types;     // [n_vocab] (empty: all Normal)
  std::vector<std::string> merges;  // byte-level BPE: "left right", best rank first
  PreTokenizer pre;                 // byte-level BPE only
  std::string pre_name;             // shown by `fasa info`
  bool ignore_merges = false;       // Llama-3: a word that is itself a token is taken whole
  int bos = -1, eos = -1, unk = -1;
  bool add_bos = true, add_eos = false;
  bool add_space_prefix = true;     // SentencePiece only
};

class Tokenizer {
 public:
  static Tokenizer from_gguf(const GgufFile& f, int n_vocab);
  // HF directory files: tokenizer.model (read with libsentencepiece) or tokenizer.json (BPE model).
  static Tokenizer from_sentencepiece(const std::string& model_path, bool add_bos, int n_vocab);
  static Tokenizer from_tokenizer_json(const std::string& json_path, const std::string& config_path, int n_vocab);

  // Throws fasa::Error naming `source` on an inconsistent vocabulary.
  Tokenizer(Vocabulary v, const std::string& source);
  Tokenizer() = default;

  // `add_special`: BOS (and EOS where the model wants it) around the text. `parse_special`: control
  // tokens written in the text (e.g. "<|im_start|>" in a chat prompt) become those tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // Text of a sequence; drops control tokens and the space the SentencePiece encoder prefixed.
  std::string decode(std::span<const int32_t> ids) const;
  // Bytes one token stands for, as it continues a text ("▁" -> " ", "Ġ" -> " ", control -> "").
  std::string token_text(int32_t id) const;
  // "SentencePiece BPE" or "byte-level BPE (pre-tokenizer NAME)".
  std::string describe() const;

  int n_vocab() const { return (int)v_.pieces.size(); }
  int bos() const { return v_.bos; }
  int eos() const { return v_.eos; }
  bool add_bos() const { return v_.add_bos; }
  // EOS, or a control token that ends a chat turn (<|eot_id|>, <|im_end|>, <|end|>, ...).
  bool is_end_of_generation(int32_t id) const;
  const std::string& piece(int32_t id) const { return v_.pieces.at(id); }
  TokenType type(int32_t id) const { return v_.types.at(id); }
  // About the bytes its tables take on the heap (a 128K-token vocabulary with its merges: tens of MiB).
  size_t memory_bytes() const;

 private:
  static Tokenizer tokenizer_json_vocabulary(const std::string& json_path, const std::string& config_path,
                                             int n_vocab);
  void encode_spm(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const;

  Vocabulary v_;
  std::unordered_map<std::string, int32_t> piece_to_id_;  // mergeable pieces only
  std::unordered_map<std::string, int32_t> merge_rank_;   // byte-level BPE: "left right" -> rank
  // User-defined (and control) tokens matched in text, by their first byte, longest first.
  std::array<std::vector<int32_t>, 256> verbatim_by_first_byte_;
  int32_t byte_to_id_[256];           // byte fallback tokens (SentencePiece <0xXX>, BPE byte characters)
};

}  // namespace fasa
