#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <queue>

#include "fasa/error.h"

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

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += (char)cp;
  } else if (cp < 0x800) {
    s += (char)(0xC0 | (cp >> 6));
    s += (char)(0x80 | (cp & 0x3F));
  } else {
    s += (char)(0xE0 | (cp >> 12));
    s += (char)(0x80 | ((cp >> 6) & 0x3F));
    s += (char)(0x80 | (cp & 0x3F));
  }
  return s;
}

bool parse_byte_piece(const std::string& p, int& value) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return false;
  unsigned v;
  if (std::sscanf(p.c_str() + 3, "%2X", &v) != 1) return false;
  value = (int)v;
  return true;
}

// GPT-2's byte <-> character table: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in order, so every byte is one visible character (' ' -> 'Ġ', '\n' -> 'Ċ').
struct ByteLevelTable {
  std::array<std::string, 256> byte_char;
  std::array<int, 512> char_byte;  // code point -> byte, -1 for code points no byte maps to
  ByteLevelTable() {
    char_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? (uint32_t)b : 256u + (uint32_t)extra++;
      byte_char[b] = utf8_encode(cp);
      char_byte[cp] = b;
    }
  }
};
const ByteLevelTable& byte_level() {
  static const ByteLevelTable t;
  return t;
}

// Bytes a byte-level piece spells; characters outside the table are kept as they are.
std::string byte_level_decode(const std::string& piece) {
  std::string s;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = std::min(utf8_len((uint8_t)piece[i]), piece.size() - i);
    uint32_t cp = (uint8_t)piece[i];
    if (len == 2) cp = ((cp & 0x1F) << 6) | ((uint8_t)piece[i + 1] & 0x3F);
    if ((len == 1 || len == 2) && cp < 512 && byte_level().char_byte[cp] >= 0) s += (char)byte_level().char_byte[cp];
    else s.append(piece, i, len);
    i += len;
  }
  return s;
}

// Greedy pair merging shared by both BPE kinds. Symbols start as the UTF-8 characters of `s`; the adjacent
// pair with the highest `priority(left, right)` merges first (leftmost on ties; nullopt: never merges).
template <class Priority>
std::vector<std::string_view> merge_pairs(std::string_view s, Priority priority) {
  struct Symbol {
    int prev, next;
    size_t start, len;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < s.size();) {
    size_t len = std::min(utf8_len((uint8_t)s[i]), s.size() - i);
    sym.push_back({(int)sym.size() - 1, (int)sym.size() + 1, i, len});
    i += len;
  }
  if (sym.empty()) return {};
  sym.back().next = -1;

  struct Pair {
    float priority;
    int left;
    size_t len;  // merged length when queued; stale entries are skipped
    bool operator<(const Pair& o) const { return priority < o.priority || (priority == o.priority && left > o.left); }
  };
  std::priority_queue<Pair> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::optional<float> p = priority(s.substr(sym[left].start, sym[left].len), s.substr(sym[right].start, sym[right].len));
    if (p) queue.push({*p, left, sym[left].len + sym[right].len});
  };
  for (int i = 0; i + 1 < (int)sym.size(); ++i) try_add(i, i + 1);
  while (!queue.empty()) {
    Pair b = queue.top();
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
  std::vector<std::string_view> out;
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(s.substr(sym[i].start, sym[i].len));
  return out;
}

}  // namespace

Tokenizer::Tokenizer(Vocabulary v, const std::string& source) : v_(std::move(v)) {
  const int n = (int)v_.pieces.size();
  if (n == 0) fail(source, "tokenizer has an empty vocabulary");
  if (v_.scores.empty()) v_.scores.assign(n, 0.0f);
  if (v_.types.empty()) v_.types.assign(n, TokenType::Normal);
  if ((int)v_.scores.size() != n || (int)v_.types.size() != n)
    fail(source, "tokenizer arrays differ in length (" + std::to_string(n) + " tokens, " +
                     std::to_string(v_.scores.size()) + " scores, " + std::to_string(v_.types.size()) + " types)");
  for (int id : {v_.bos, v_.eos, v_.unk})
    if (id < -1 || id >= n) fail(source, "special token id " + std::to_string(id) + " is outside the vocabulary");
  const bool bpe = v_.kind == TokenizerKind::ByteLevelBpe;
  if (bpe && v_.pre.empty()) fail(source, "byte-level BPE tokenizer has no pre-tokenizer");

  std::fill(std::begin(byte_to_id_), std::end(byte_to_id_), -1);
  for (int i = 0; i < n; ++i) {
    int t = (int)v_.types[i];
    if (t < 1 || t > 6) v_.types[i] = TokenType::Normal;  // unknown type codes: treat as plain text
    int byte;
    if (v_.types[i] == TokenType::Byte && !bpe) {
      if (!parse_byte_piece(v_.pieces[i], byte)) fail(source, "byte token " + std::to_string(i) + " is not <0xXX>");
      byte_to_id_[byte] = i;
    } else if (v_.types[i] == TokenType::Normal || v_.types[i] == TokenType::UserDefined) {
      piece_to_id_.emplace(v_.pieces[i], i);
    }
    if ((v_.types[i] == TokenType::UserDefined || v_.types[i] == TokenType::Control) && !v_.pieces[i].empty())
      verbatim_by_first_byte_[(uint8_t)v_.pieces[i][0]].push_back(i);
  }
  for (auto& ids : verbatim_by_first_byte_)
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return v_.pieces[a].size() > v_.pieces[b].size(); });
  if (!bpe) return;

  for (int b = 0; b < 256; ++b) {
    auto it = piece_to_id_.find(byte_level().byte_char[b]);
    if (it != piece_to_id_.end()) byte_to_id_[b] = it->second;
  }
  merge_rank_.reserve(v_.merges.size());
  for (size_t r = 0; r < v_.merges.size(); ++r) {
    const std::string& m = v_.merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos)
      fail(source, "merge " + std::to_string(r) + " ('" + m.substr(0, 64) + "') is not two pieces separated by a space");
    merge_rank_.emplace(m, (int32_t)r);  // a repeated merge keeps its best rank
  }
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  if (id == v_.eos) return true;
  if (id < 0 || id >= n_vocab() || v_.types[id] != TokenType::Control) return false;
  const std::string& p = v_.pieces[id];
  return p == "<|eot_id|>" || p == "<|eom_id|>" || p == "<|im_end|>" || p == "<|end|>" || p == "<|endoftext|>" ||
         p == "</s>" || p == "<end_of_turn>";
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && v_.add_bos && v_.bos >= 0) out.push_back(v_.bos);
  // Cut out user-defined tokens, and control tokens when asked (longest match first); the text
  // between them is tokenized normally.
  size_t plain = 0;
  bool after_special = true;  // SentencePiece prefixes a space at the start and after a special token
  auto flush = [&](size_t end) {
    if (end > plain) {
      std::string_view frag = text.substr(plain, end - plain);
      if (v_.kind == TokenizerKind::SentencePiece) encode_spm(frag, after_special, out);
      else for (std::string_view w : v_.pre.split(frag)) encode_bpe_word(w, out);
      after_special = false;
    }
  };
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    for (int32_t id : verbatim_by_first_byte_[(uint8_t)text[i]])
      if ((parse_special || v_.types[id] != TokenType::Control) &&
          text.compare(i, v_.pieces[id].size(), v_.pieces[id]) == 0) {
        hit = id;
        break;
      }
    if (hit < 0) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit);
    after_special = true;
    i += v_.pieces[hit].size();
    plain = i;
  }
  flush(text.size());
  if (add_special && v_.add_eos && v_.eos >= 0) out.push_back(v_.eos);
  return out;
}

void Tokenizer::encode_spm(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  // Normalise: spaces become '▁', plus one leading '▁' when the model was trained that way.
  std::string norm = v_.add_space_prefix && at_start ? kSpace : "";
  for (char c : text) {
    if (c == ' ') norm += kSpace;
    else norm += c;
  }
  auto score = [&](std::string_view l, std::string_view r) -> std::optional<float> {
    auto it = piece_to_id_.find(std::string(l) + std::string(r));
    if (it == piece_to_id_.end()) return std::nullopt;
    return v_.scores[it->second];
  };
  for (std::string_view piece : merge_pairs(norm, score)) {
    auto it = piece_to_id_.find(std::string(piece));
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char c : piece) {  // byte fallback, or <unk> where the vocabulary has no byte tokens
      int id = byte_to_id_[c];
      out.push_back(id >= 0 ? id : v_.unk);
    }
  }
}

void Tokenizer::encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  std::string mapped;
  for (unsigned char c : word) mapped += byte_level().byte_char[c];
  if (v_.ignore_merges) {
    auto it = piece_to_id_.find(mapped);
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  auto rank = [&](std::string_view l, std::string_view r) -> std::optional<float> {
    std::string key;
    key.reserve(l.size() + r.size() + 1);
    key.append(l).append(1, ' ').append(r);
    auto it = merge_rank_.find(key);
    if (it == merge_rank_.end()) return std::nullopt;
    return -(float)it->second;  // lower rank merges first
  };
  for (std::string_view piece : merge_pairs(mapped, rank)) {
    auto it = piece_to_id_.find(std::string(piece));
    if (it != piece_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // A merge result missing from the vocabulary: spell it byte by byte.
    for (unsigned char c : byte_level_decode(std::string(piece))) {
      int id = byte_to_id_[c];
      if (id >= 0 || v_.unk >= 0) out.push_back(id >= 0 ? id : v_.unk);
    }
  }
}

std::string Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& p = v_.pieces[id];
  switch (v_.types[id]) {
    case TokenType::Control:
    case TokenType::Unused: return "";
    case TokenType::UserDefined: return p;
    case TokenType::Byte: {
      int b = 0;
      if (parse_byte_piece(p, b)) return std::string(1, (char)b);
      break;
    }
    default: break;
  }
  if (v_.kind == TokenizerKind::ByteLevelBpe) return byte_level_decode(p);
  std::string s;
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
  const bool strip_prefix = v_.kind == TokenizerKind::SentencePiece && v_.add_space_prefix;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab() || v_.types[id] == TokenType::Control) continue;
    std::string t = token_text(id);
    if (first && strip_prefix && !t.empty() && t[0] == ' ') t.erase(0, 1);
    first = false;
    s += t;
  }
  return s;
}

size_t Tokenizer::memory_bytes() const {
  // libstdc++'s layouts: a string is 32 bytes, its characters past 15 a heap block of their own; a hash
  // map's node holds its key, value, next pointer and cached hash (a heap block), and a bucket pointer.
  constexpr size_t kBlock = 16;  // malloc's header and rounding, about
  auto text = [](const std::string& t) { return sizeof(std::string) + (t.capacity() > 15 ? t.capacity() + 1 + kBlock : 0); };
  auto map = [&](const std::unordered_map<std::string, int32_t>& m) {
    size_t b = m.bucket_count() * sizeof(void*);
    for (const auto& [key, id] : m) b += text(key) + 24 + kBlock;
    return b;
  };
  size_t b = v_.scores.size() * sizeof(float) + v_.types.size() * sizeof(TokenType);
  for (const auto& t : v_.pieces) b += text(t);
  for (const auto& t : v_.merges) b += text(t);
  return b + map(piece_to_id_) + map(merge_rank_);
}

std::string Tokenizer::describe() const {
  if (v_.kind == TokenizerKind::SentencePiece) return "SentencePiece BPE";
  return "byte-level BPE (pre-tokenizer " + v_.pre_name + ", " + std::to_string(v_.merges.size()) + " merges)";
}

}  // namespace fasa
