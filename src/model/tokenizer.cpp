#include "model/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <queue>

#include "io/gguf.h"
#include "util/error.h"

namespace fasa {

namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581 '▁', SentencePiece's visible space

size_t utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;  // stray continuation or invalid byte: its own symbol (it will fall back to a byte token)
}

bool parse_byte_piece(const std::string& p, int& value) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return false;
  unsigned v;
  if (std::sscanf(p.c_str() + 3, "%2X", &v) != 1) return false;
  value = (int)v;
  return true;
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::vector<TokenType> types,
                     int bos, int eos, int unk, bool add_bos, bool add_space_prefix, const std::string& source)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), types_(std::move(types)), bos_(bos), eos_(eos),
      unk_(unk), add_bos_(add_bos), add_space_prefix_(add_space_prefix) {
  const int n = (int)pieces_.size();
  if (n == 0) fail(source, "tokenizer has an empty vocabulary");
  if ((int)scores_.size() != n || (int)types_.size() != n)
    fail(source, "tokenizer arrays differ in length (" + std::to_string(n) + " tokens, " +
                     std::to_string(scores_.size()) + " scores, " + std::to_string(types_.size()) + " types)");
  for (int id : {bos_, eos_, unk_})
    if (id < -1 || id >= n) fail(source, "special token id " + std::to_string(id) + " is outside the vocabulary");
  for (auto& b : byte_to_id_) b = -1;
  for (int i = 0; i < n; ++i) {
    int t = (int)types_[i];
    if (t < 1 || t > 6) types_[i] = TokenType::Normal;  // unknown type codes: treat as plain text
    int byte;
    if (types_[i] == TokenType::Byte) {
      if (!parse_byte_piece(pieces_[i], byte)) fail(source, "byte token " + std::to_string(i) + " is not <0xXX>");
      byte_to_id_[byte] = i;
    } else if (types_[i] == TokenType::Normal || types_[i] == TokenType::UserDefined) {
      piece_to_id_.emplace(pieces_[i], i);
    }
  }
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f, int n_vocab) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "llama")
    fail(f.path(), "tokenizer model '" + model + "' is not supported yet (supported: llama/SentencePiece)");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if ((int)tokens.size() != n_vocab)
    fail(f.path(), "tokenizer has " + std::to_string(tokens.size()) + " tokens but the model's vocabulary is " +
                       std::to_string(n_vocab));
  std::vector<float> scores = f.find("tokenizer.ggml.scores") ? f.get_float_array("tokenizer.ggml.scores")
                                                               : std::vector<float>(tokens.size(), 0.0f);
  std::vector<TokenType> types(tokens.size(), TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type")) {
    auto raw = f.get_int_array("tokenizer.ggml.token_type");
    if (raw.size() != tokens.size()) fail(f.path(), "tokenizer.ggml.token_type length differs from tokens");
    for (size_t i = 0; i < raw.size(); ++i) types[i] = (TokenType)raw[i];
  }
  return Tokenizer(std::move(tokens), std::move(scores), std::move(types),
                   (int)f.get_int("tokenizer.ggml.bos_token_id", 1), (int)f.get_int("tokenizer.ggml.eos_token_id", 2),
                   (int)f.get_int("tokenizer.ggml.unknown_token_id", 0), f.get_bool("tokenizer.ggml.add_bos_token", true),
                   f.get_bool("tokenizer.ggml.add_space_prefix", true), f.path());
}

Tokenizer Tokenizer::from_sentencepiece(const std::string& model_path, bool add_bos, int n_vocab) {
  sentencepiece::SentencePieceProcessor sp;
  auto status = sp.Load(model_path);
  if (!status.ok()) fail(model_path, "cannot load SentencePiece model: " + status.ToString());
  const int n = sp.GetPieceSize();
  if (n != n_vocab)
    fail(model_path, "tokenizer has " + std::to_string(n) + " pieces but the model's vocabulary is " +
                         std::to_string(n_vocab));
  std::vector<std::string> pieces(n);
  std::vector<float> scores(n);
  std::vector<TokenType> types(n);
  for (int i = 0; i < n; ++i) {
    pieces[i] = sp.IdToPiece(i);
    scores[i] = sp.GetScore(i);
    types[i] = sp.IsByte(i) ? TokenType::Byte
               : sp.IsControl(i) ? TokenType::Control
               : sp.IsUnknown(i) ? TokenType::Unknown
               : sp.IsUnused(i) ? TokenType::Unused
                                : TokenType::Normal;
  }
  // The normalizer's add_dummy_prefix is not exposed: observe it on a one-letter text.
  std::vector<std::string> probe;
  sp.Encode("a", &probe).IgnoreError();
  const bool space_prefix = !probe.empty() && probe[0].rfind(kSpace, 0) == 0;
  return Tokenizer(std::move(pieces), std::move(scores), std::move(types), sp.bos_id(), sp.eos_id(), sp.unk_id(),
                   add_bos, space_prefix, model_path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  if (text.empty()) return out;

  // Normalise: spaces become '▁', plus one leading '▁' when the model was trained that way.
  std::string norm = add_space_prefix_ ? kSpace : "";
  for (char c : text) {
    if (c == ' ') norm += kSpace;
    else norm += c;
  }

  // Symbols start as single UTF-8 characters in a doubly linked list.
  struct Symbol {
    int prev, next;
    size_t start, len;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < norm.size();) {
    size_t len = std::min(utf8_len((uint8_t)norm[i]), norm.size() - i);
    sym.push_back({(int)sym.size() - 1, (int)sym.size() + 1, i, len});
    i += len;
  }
  sym.back().next = -1;

  // Greedily merge the adjacent pair whose merged piece has the highest score (leftmost on ties).
  struct Bigram {
    float score;
    int left;
    size_t len;  // merged length when queued; stale entries are skipped
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    auto it = piece_to_id_.find(norm.substr(sym[left].start, sym[left].len + sym[right].len));
    if (it != piece_to_id_.end()) queue.push({scores_[it->second], left, sym[left].len + sym[right].len});
  };
  for (int i = 0; i + 1 < (int)sym.size(); ++i) try_add(i, i + 1);
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[l.next];
    if (l.len + r.len != b.len) continue;  // one side changed since this pair was queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i >= 0 && i < (int)sym.size(); i = sym[i].next) {
    std::string piece = norm.substr(sym[i].start, sym[i].len);
    auto it = piece_to_id_.find(piece);
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char c : piece) {  // byte fallback, or <unk> where the vocabulary has no byte tokens
      int id = byte_to_id_[c];
      out.push_back(id >= 0 ? id : unk_);
    }
  }
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return "";
  switch (types_[id]) {
    case TokenType::Control:
    case TokenType::Unused: return "";
    case TokenType::Byte: {
      int b = 0;
      parse_byte_piece(pieces_[id], b);
      return std::string(1, (char)b);
    }
    default: break;
  }
  std::string s;
  const std::string& p = pieces_[id];
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpace.size(), kSpace) == 0) {
      s += ' ';
      i += kSpace.size();
    } else {
      s += p[i++];
    }
  }
  return s;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab() || types_[id] == TokenType::Control) continue;
    std::string t = token_text(id);
    if (first && add_space_prefix_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
    first = false;
    s += t;
  }
  return s;
}

}  // namespace fasa
