// `fasa tokenize`: the token ids of a text, as llama.cpp's llama-tokenize prints them.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "io/gguf.h"
#include "model/model.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {

struct TokenizeOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string prompt, prompt_file;  // prompt_file "-": standard input
  bool prompt_given = false;         // -p, even -p ""
  bool ids_only = false, no_bos = false;
};

// A GGUF needs only its metadata (vocabulary-only files work too); a HF directory loads as a model.
Tokenizer load_tokenizer(const std::string& path) {
  if (std::filesystem::is_directory(path)) return std::move(load_model(path)->tokenizer);
  GgufFile f(path);
  return Tokenizer::from_gguf(f, (int)f.get_string_array("tokenizer.ggml.tokens").size());
}

int tokenize(const TokenizeOptions& o) {
  if (o.prompt_given == !o.prompt_file.empty()) throw Error("give exactly one of -p TEXT or -f FILE");
  const std::string text = o.prompt_given ? o.prompt : read_text_or_stdin(o.prompt_file);
  const Tokenizer tok = load_tokenizer(o.model);
  const std::vector<int32_t> ids = tok.encode(text, !o.no_bos);
  if (o.ids_only) {  // as llama-tokenize --ids: a Python list
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %d" : "%d", ids[i]);
    std::printf("]\n");
    return 0;
  }
  for (int32_t id : ids) {
    const bool control = tok.type(id) == TokenType::Control;
    std::printf("%6d -> '%s'\n", id, control ? tok.piece(id).c_str() : tok.token_text(id).c_str());
  }
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  add_model_option(cmd, o->model, "A .gguf file (vocabulary-only files work) or a Hugging Face directory");
  cmd->add_option_function<std::string>(
      "-p,--prompt", [o](const std::string& p) { o->prompt = p, o->prompt_given = true; }, "Text to tokenize");
  add_file_option(cmd, o->prompt_file, "Read the text from a file ('-': standard input)");
  cmd->add_flag("--ids", o->ids_only, "Print only the ids, as a list: [1, 706, ...]");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS (or EOS) token the model asks for");
  return {cmd, [o] { return tokenize(*o); }};
}

}  // namespace fasa::cli
