#include "cli/chat.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/speed_lines.h"

namespace fasa::cli {

namespace {

// Context size: llama-cli's default of 4096 (at most the model's); 0 asks for the model's own.
int64_t chat_context(int64_t asked, int64_t n_train) {
  if (asked > 0) return asked;
  if (asked == 0 || n_train <= 0) return n_train > 0 ? n_train : 4096;
  return std::min<int64_t>(4096, n_train);
}

// Feeds what `ids` adds to what ctx holds: the tokens they share stay, the rest is forgotten — where
// the policy continues a truncated context exactly (not H2O or SnapKV, whose votes remember what was
// forgotten: there the whole conversation is fed again).
void feed_difference(Context& ctx, const std::vector<int32_t>& ids) {
  const std::vector<int32_t>& held = ctx.tokens();
  size_t common = 0;
  while (common < held.size() && common < ids.size() && held[common] == ids[common]) ++common;
  common = std::min(common, ids.size() - 1);  // at least one token fed: its logits start the reply
  if ((int64_t)common < ctx.n_past() && !ctx.prefix_reuse_is_exact()) common = 0;
  if ((int64_t)common < ctx.n_past()) ctx.truncate((int64_t)common);
  ctx.feed_tokens(std::vector<int32_t>(ids.begin() + (int64_t)common, ids.end()));
}

}  // namespace

int chat(ChatOptions o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  pick_seed(o.sampling, o.seed_given);
  Engine engine(o.model);
  ContextOptions co;
  co.policy = o.policy;
  co.n_ctx = chat_context(o.n_ctx, engine.info().n_ctx_train);
  Context ctx(engine, co);
  catch_interrupts();  // from here on Ctrl-C stops a reply (while the model loaded, it ended the program)
  const bool terminal = isatty(STDIN_FILENO);
  std::fprintf(stderr, "chat with %s (%s format, context %lld tokens): /exit or end of input quits; "
               "Ctrl-C stops a reply\n", o.model.c_str(), engine.info().chat_format.c_str(), (long long)ctx.n_ctx());

  std::vector<ChatMessage> messages;
  if (!o.system_prompt.empty()) messages.push_back({"system", o.system_prompt});
  GenerationOptions gen;
  gen.sampling = o.sampling;
  // Without a template the turns are "role: content" lines; a reply ends where it starts the next one.
  const bool plain = engine.info().chat_format == "plain";
  if (plain) gen.stop = {"\nuser:"};
  int status = 0;
  int64_t decode_steps = 0;
  for (bool first = true;; first = false) {
    std::string line;
    if (first && o.has_first_message) {
      line = o.first_message;
    } else {
      std::fputs("\n> ", stdout);
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || take_interrupt()) break;
      if (!terminal) std::printf("%s\n", line.c_str());  // a pipe: the turn in the transcript
    }
    if (line == "/exit") break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::vector<int32_t> ids = engine.tokenize(engine.chat_prompt(messages), true, true);
    if ((int64_t)ids.size() >= ctx.n_ctx()) {
      std::fprintf(stderr, "error: the conversation (%zu tokens) fills the context of %lld tokens (raise -c)\n",
                   ids.size(), (long long)ctx.n_ctx());
      status = 1;
      break;
    }
    take_interrupt();  // one pressed while the turn was typed is not for this reply
    feed_difference(ctx, ids);
    const int64_t room = ctx.n_ctx() - ctx.n_past();
    // A Ctrl-C during the prefill: no reply at all.
    gen.max_tokens = take_interrupt() ? 0 : (int)(o.n_predict < 0 ? room : std::min<int64_t>(o.n_predict, room));
    const GenerationResult r = ctx.generate(gen, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !take_interrupt();
    });
    std::fputc('\n', stdout);
    // As the next turn's prompt renders it: "assistant: " already has the space a plain reply starts with,
    // so the tokens the context holds are found again there and only the new turn is prefilled.
    messages.push_back({"assistant", plain && r.text.starts_with(' ') ? r.text.substr(1) : r.text});
    if (r.finish_reason == FinishReason::Length && gen.max_tokens == room)
      std::fprintf(stderr, "note: the reply stopped at the end of the context (%lld tokens; raise -c)\n",
                   (long long)ctx.n_ctx());
    decode_steps += decoded_steps(r);
    if (o.single_turn) break;
  }
  std::fflush(stdout);
  print_speed_lines(engine, ctx, o.model, decode_steps);
  return status;
}

}  // namespace fasa::cli
