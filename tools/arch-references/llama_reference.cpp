// llama.cpp's greedy continuation of fixed prompt token ids, with the logits of the prompt's last token
// and of each generated one, as JSON on stdout. Built by tools/arch-references/make.py against a
// llama.cpp build (not part of fasa's build). `--text TEXT`: the prompt is TEXT as llama.cpp tokenizes
// it (special tokens parsed, BOS as the model says). `--no-flash-attn`: llama.cpp's other attention
// path (its default, flash attention, rounds the queries and the value sums to F16 differently).
//   llama_reference MODEL.gguf N_PREDICT [--no-flash-attn] (ID... | --text TEXT)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_PREDICT [--no-flash-attn] (ID... | --text TEXT)\n", argv[0]);
    return 2;
  }
  int first = 3;  // the prompt's first argument
  const bool no_flash_attn = std::string(argv[first]) == "--no-flash-attn";
  if (no_flash_attn) ++first;
  if (first >= argc) return 2;
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = cp.n_threads_batch = 2;
  if (no_flash_attn) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model)), n_predict = std::atoi(argv[2]);
  std::vector<llama_token> tokens;
  if (std::string(argv[first]) == "--text" && argc == first + 2) {
    const std::string text = argv[first + 1];
    tokens.resize(text.size() + 8);
    const int n = llama_tokenize(llama_model_get_vocab(model), text.data(), (int32_t)text.size(), tokens.data(),
                                 (int32_t)tokens.size(), /*add_special=*/true, /*parse_special=*/true);
    if (n < 0) return 1;
    tokens.resize(n);
  } else {
    for (int i = first; i < argc; ++i) tokens.push_back(std::atoi(argv[i]));
  }
  std::printf("{\"prompt\": [");
  for (size_t i = 0; i < tokens.size(); ++i) std::printf(i ? ", %d" : "%d", tokens[i]);
  std::printf("],\n \"steps\": [\n");
  llama_batch batch = llama_batch_get_one(tokens.data(), (int32_t)tokens.size());
  llama_token next = 0;
  for (int step = 0; step < n_predict; ++step) {
    if (llama_decode(ctx, batch) != 0) return 1;
    const float* logits = llama_get_logits_ith(ctx, -1);
    next = 0;
    for (int v = 1; v < n_vocab; ++v)
      if (logits[v] > logits[next]) next = v;
    std::printf("  {\"token\": %d, \"logits\": [", next);
    for (int v = 0; v < n_vocab; ++v) std::printf(v ? ", %.6g" : "%.6g", logits[v]);
    std::printf("]}%s\n", step + 1 < n_predict ? "," : "");
    batch = llama_batch_get_one(&next, 1);
  }
  std::printf(" ]}\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
