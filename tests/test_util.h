#pragma once
// Helpers shared by the tests: where the shared data lives, temp files, a GGUF writer, random data.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "io/gguf_writer.h"
#include "model/session.h"
#include "ops/dtype.h"

namespace fasa::test {

// ../shared (FASA_SHARED env var overrides). Empty when absent.
std::string shared_dir();
// Skips the current test with a visible message when the shared models are missing.
#define FASA_REQUIRE_SHARED()                                                                   \
  do {                                                                                          \
    if (::fasa::test::shared_dir().empty())                                                     \
      GTEST_SKIP() << "shared models not found (set FASA_SHARED or place ../shared): skipped"; \
  } while (0)

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
// A fresh directory under the system temp dir, removed when the test binary exits.
std::string temp_dir();

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f);

// The message of the fasa::Error f throws, or "(no error)".
std::string error_message(const std::function<void()>& f);

// max |a - b| / max |b|
double normalized_error(const float* a, const float* b, size_t n);

// Greedy tokens after `prompt` from a fresh session `s` (the last one is not evaluated).
std::vector<int32_t> greedy_tokens(Session& s, const std::vector<int32_t>& prompt, int n);

using ::fasa::GgufWriter;


// A small but complete llama-architecture (or qwen2/qwen3 with arch) GGUF with random F32 weights and a byte-level
// SentencePiece vocabulary. Knobs let tests break one thing at a time.
struct TinyLlamaSpec {
  std::string arch = "llama";
  std::string tokenizer_model = "llama";
  int n_layer = 2, n_embd = 32, n_head = 4, n_head_kv = 2, n_ff = 48, n_ctx = 64;
  uint32_t seed = 7;
  std::string skip_tensor;                 // leave this tensor out
  std::string misshape_tensor;             // give this tensor a wrong shape
  std::string scale_tensor;                // multiply this tensor's values by `scale`
  float scale = 1.0f;
  std::string extra_tensor;                // one more F32 tensor of head_dim / 2 values (rope factors)
  std::vector<std::string> extra_tokens;   // appended after the 259 base tokens
};
int tiny_vocab_size(const TinyLlamaSpec& s);
GgufWriter tiny_llama_gguf(const TinyLlamaSpec& s);

}  // namespace fasa::test
