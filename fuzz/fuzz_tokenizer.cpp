// Tokenizers on arbitrary bytes: encode (plain and with special tokens) and decode of arbitrary
// ids, with the bundled SentencePiece vocabulary and, when ../shared is there, a byte-level BPE one.
// Encoding must never fail; decoding must give text for any in-range ids.
#include <vector>

#include "fasa/error.h"
#include "io/gguf.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto model = fasa::load_model(FASA_DEFAULT_MODEL);
  static const std::vector<fasa::Tokenizer> byte_level = [] {
    std::vector<fasa::Tokenizer> t;
    for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
      try {
        fasa::GgufFile f(std::string(FASA_SHARED_DIR) + "/tokenizers/" + name);
        t.push_back(fasa::Tokenizer::from_gguf(f, (int)f.get_string_array("tokenizer.ggml.tokens").size()));
      } catch (const fasa::Error&) {  // ../shared absent: the bundled vocabulary only
      }
    }
    return t;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto exercise = [&](const fasa::Tokenizer& tok) {
    tok.encode(text, true, false);
    const std::vector<int32_t> ids = tok.encode(text, false, true);
    tok.decode(ids);
    std::vector<int32_t> raw;  // the bytes read as ids
    for (size_t i = 0; i + 1 < size; i += 2) raw.push_back((data[i] | data[i + 1] << 8) % tok.n_vocab());
    tok.decode(raw);
    for (int32_t id : raw) tok.token_text(id);
  };
  exercise(model->tokenizer);
  for (const auto& t : byte_level) exercise(t);
  return 0;
}
