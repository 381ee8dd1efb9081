// Tokenizer construction from the files models ship: GGUF metadata, tokenizer.model, tokenizer.json.
#include <sentencepiece_processor.h>

#include <filesystem>

#include "io/gguf.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"
#include "fasa/error.h"

namespace fasa {

namespace {

using nlohmann::json;

const std::string kSpace = "\xE2\x96\x81";

void check_vocab_size(size_t n, int n_vocab, const std::string& source) {
  if ((int64_t)n != n_vocab)
    fail(source, "tokenizer has " + std::to_string(n) + " tokens but the model's vocabulary is " +
                     std::to_string(n_vocab));
}

bool is_llama3_pre(const std::string& pre) { return pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3"; }

// A tokenizer_config.json special token: "text" or {"content": "text"}.
std::string special_token_text(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return "";
}

// The regexes of a tokenizer.json pre_tokenizer: Split(Regex, Isolated) steps and a ByteLevel step
// (its use_regex adds GPT-2's pattern). Anything else is not something this engine reproduces.
std::vector<std::string> byte_level_patterns(const json& pt, const std::string& path) {
  std::vector<const json*> steps;
  if (pt.is_object() && pt.value("type", "") == "Sequence" && pt.contains("pretokenizers") &&
      pt["pretokenizers"].is_array()) {
    for (const json& s : pt["pretokenizers"]) steps.push_back(&s);
  } else {
    steps.push_back(&pt);
  }
  std::vector<std::string> patterns;
  bool byte_level = false;
  for (const json* s : steps) {
    const std::string type = s->is_object() ? s->value("type", "") : "";
    if (type == "Split") {
      const json& p = s->contains("pattern") ? (*s)["pattern"] : json();
      if (!p.is_object() || !p.contains("Regex") || !p["Regex"].is_string())
        fail(path, "pre_tokenizer Split without a Regex pattern is not supported");
      if (s->value("behavior", "") != "Isolated" || s->value("invert", false))
        fail(path, "pre_tokenizer Split behaviour other than Isolated is not supported");
      patterns.push_back(p["Regex"].get<std::string>());
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (s->value("add_prefix_space", false)) fail(path, "ByteLevel add_prefix_space is not supported");
      if (s->value("use_regex", true)) patterns.push_back(PreTokenizer::gpt2_pattern());
    } else {
      fail(path, "pre_tokenizer '" + type + "' is not supported (supported: Split, ByteLevel)");
    }
  }
  if (!byte_level) fail(path, "not a byte-level BPE tokenizer (no ByteLevel pre_tokenizer)");
  return patterns;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f, int n_vocab) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  Vocabulary v;
  if (model == "llama") {
    v.kind = TokenizerKind::SentencePiece;
  } else if (model == "gpt2") {
    v.kind = TokenizerKind::ByteLevelBpe;
  } else {
    fail(f.path(), "tokenizer model '" + model + "' is not supported (supported: llama = SentencePiece BPE, "
                   "gpt2 = byte-level BPE)");
  }
  v.pieces = f.get_string_array("tokenizer.ggml.tokens");
  check_vocab_size(v.pieces.size(), n_vocab, f.path());
  if (f.find("tokenizer.ggml.scores")) v.scores = f.get_float_array("tokenizer.ggml.scores");
  if (f.find("tokenizer.ggml.token_type")) {
    auto raw = f.get_int_array("tokenizer.ggml.token_type");
    if (raw.size() != v.pieces.size()) fail(f.path(), "tokenizer.ggml.token_type length differs from tokens");
    for (int32_t t : raw) v.types.push_back((TokenType)t);
  }
  const bool spm = v.kind == TokenizerKind::SentencePiece;
  v.bos = (int)f.get_int("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v.eos = (int)f.get_int("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v.unk = (int)f.get_int("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  if (spm) {
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  } else {
    v.merges = f.get_string_array("tokenizer.ggml.merges");
    auto pre = f.get_string_opt("tokenizer.ggml.pre");
    if (!pre) fail(f.path(), "byte-level BPE tokenizer has no tokenizer.ggml.pre (the pre-tokenizer name)");
    v.pre = PreTokenizer::for_name(*pre, f.path());
    v.pre_name = *pre;
    v.ignore_merges = is_llama3_pre(*pre);
  }
  return Tokenizer(std::move(v), f.path());
}

Tokenizer Tokenizer::from_sentencepiece(const std::string& model_path, bool add_bos, int n_vocab) {
  sentencepiece::SentencePieceProcessor sp;
  auto status = sp.Load(model_path);
  if (!status.ok()) fail(model_path, "cannot load SentencePiece model: " + status.ToString());
  const int n = sp.GetPieceSize();
  check_vocab_size(n, n_vocab, model_path);
  Vocabulary v;
  for (int i = 0; i < n; ++i) {
    v.pieces.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    v.types.push_back(sp.IsByte(i)      ? TokenType::Byte
                      : sp.IsControl(i) ? TokenType::Control
                      : sp.IsUnknown(i) ? TokenType::Unknown
                      : sp.IsUnused(i)  ? TokenType::Unused
                                        : TokenType::Normal);
  }
  // The normalizer's add_dummy_prefix is not exposed: observe it on a one-letter text.
  std::vector<std::string> probe;
  sp.Encode("a", &probe).IgnoreError();
  v.add_space_prefix = !probe.empty() && probe[0].rfind(kSpace, 0) == 0;
  v.bos = sp.bos_id();
  v.eos = sp.eos_id();
  v.unk = sp.unk_id();
  v.add_bos = add_bos;
  return Tokenizer(std::move(v), model_path);
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& json_path, const std::string& config_path, int n_vocab) {
  return with_json_errors(json_path, [&] { return tokenizer_json_vocabulary(json_path, config_path, n_vocab); });
}

Tokenizer Tokenizer::tokenizer_json_vocabulary(const std::string& json_path, const std::string& config_path,
                                               int n_vocab) {
  const json j = read_json_file(json_path, "tokenizer");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail(json_path, "no 'model' object");
  const json& m = j["model"];
  if (m.value("type", "") != "BPE")
    fail(json_path, "tokenizer model type '" + m.value("type", "") + "' is not supported (supported: BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail(json_path, "model.vocab is not an object");

  // Ids come from the vocab and the added tokens; padding rows of the embedding get unused pieces.
  Vocabulary v;
  v.kind = TokenizerKind::ByteLevelBpe;
  v.pieces.resize(n_vocab);
  v.types.assign(n_vocab, TokenType::Unused);
  std::vector<bool> seen(n_vocab, false);
  auto place = [&](const json& id_json, const std::string& piece, TokenType type) {
    if (!id_json.is_number_integer()) fail(json_path, "token '" + piece.substr(0, 64) + "' has a non-integer id");
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      fail(json_path, "token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                          std::to_string(n_vocab));
    v.pieces[id] = piece;
    v.types[id] = type;
    seen[id] = true;
  };
  for (auto& [piece, id] : m["vocab"].items()) place(id, piece, TokenType::Normal);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id"))
        fail(json_path, "an added_tokens entry lacks content or id");
      place(t["id"], t["content"].get<std::string>(), t.value("special", false) ? TokenType::Control
                                                                                : TokenType::UserDefined);
    }
  for (int i = 0; i < n_vocab; ++i)
    if (!seen[i]) v.pieces[i] = "[PAD" + std::to_string(i) + "]";

  if (!m.contains("merges") || !m["merges"].is_array()) fail(json_path, "model.merges is not an array");
  for (const json& mg : m["merges"]) {
    if (mg.is_string()) v.merges.push_back(mg.get<std::string>());
    else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string())
      v.merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
    else fail(json_path, "a merge is neither \"a b\" nor [\"a\", \"b\"]");
  }
  v.ignore_merges = m.value("ignore_merges", false);
  v.pre = PreTokenizer(byte_level_patterns(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), json_path),
                       json_path);
  v.pre_name = "from tokenizer.json";

  json cfg = std::filesystem::exists(config_path) ? read_json_file(config_path, "tokenizer config") : json::object();
  auto id_of = [&](const std::string& text) {
    for (int i = 0; i < n_vocab; ++i)
      if (seen[i] && v.pieces[i] == text) return i;
    return -1;
  };
  v.bos = id_of(special_token_text(cfg, "bos_token"));
  v.eos = id_of(special_token_text(cfg, "eos_token"));
  v.add_bos = cfg.is_object() && cfg.value("add_bos_token", false) && v.bos >= 0;
  v.add_eos = cfg.is_object() && cfg.value("add_eos_token", false) && v.eos >= 0;
  return Tokenizer(std::move(v), json_path);
}

}  // namespace fasa
