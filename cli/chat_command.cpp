// `fasa chat`: a conversation with the model (cli/chat.cpp), as llama-cli's default mode.
#include <memory>

#include "cli/chat.h"
#include "cli/commands.h"
#include "fasa/error.h"

namespace fasa::cli {

Command add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("chat", "A conversation in the model's chat format, a turn per line of input");
  add_model_option(cmd, o->model);
  add_conversation_options(cmd, o->system_prompt, o->single_turn);
  cmd->add_option_function<std::string>(
      "-p,--prompt", [o](const std::string& p) { o->first_message = p, o->has_first_message = true; },
      "The first user turn (then the turns of standard input)");
  add_file_option(cmd, *file, "Read the first user turn from a file");
  add_n_predict_option(cmd, o->n_predict, "Tokens per reply at most (-1: until the model ends its turn; a model without a chat template: the end of the line, at most 256)", -1);
  add_ctx_option(cmd, o->n_ctx, "Context size (default: 4096, at most the model's; 0: the model's)", 0);
  add_generation_options(cmd, o->threads, o->engine, o->policy, o->sampling, o->seed_given);
  return {cmd, [o, file] {
            if (!file->empty()) {
              if (o->has_first_message) throw Error("give at most one of -p PROMPT or -f FILE");
              o->first_message = read_text_file(*file), o->has_first_message = true;
            }
            return chat(*o);
          }};
}

}  // namespace fasa::cli
