#include "cli/chat.h"

#include <omp.h>
#include <algorithm>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/line_reader.h"
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

// The conversation's prompt with room for a reply of `reply_room` tokens: the oldest turns after a
// system prompt are dropped until it fits, as llama-cli's context shift forgets the oldest tokens;
// `dropped` counts them. Empty, and `messages` unchanged, when the newest turn alone does not fit.
std::vector<int32_t> fit_conversation(const Engine& engine, std::vector<ChatMessage>& messages, int64_t n_ctx,
                                      int64_t reply_room, int& dropped) {
  std::vector<ChatMessage> kept = messages;
  const size_t first = !kept.empty() && kept.front().role == "system" ? 1 : 0;
  for (dropped = 0;; ++dropped) {
    std::vector<int32_t> ids = engine.tokenize(engine.chat_prompt(kept), true, true);
    if ((int64_t)ids.size() + reply_room <= n_ctx) {
      messages = std::move(kept);
      return ids;
    }
    if (kept.size() - first <= 1) return {};
    kept.erase(kept.begin() + (std::ptrdiff_t)first);
  }
}

// How replies are generated and how long they may be.
struct ReplyPlan {
  GenerationOptions gen;
  bool plain = false;  // the model has no chat template
  int cap = -1;        // tokens a reply may take; -1: until an end token or the context's end
  int64_t room = 0;    // tokens kept for a reply when old turns must go
};

ReplyPlan plan_replies(const ChatOptions& o, const Engine& engine, int64_t n_ctx) {
  ReplyPlan p;
  p.gen.sampling = o.sampling;
  // Without a template the turns are "role: content" lines: a reply is one line (a plain model has no
  // end-of-turn token, and would otherwise write on to the end of the context), at most kPlainReply
  // tokens unless -n says otherwise.
  p.plain = engine.info().chat_format == "plain";
  constexpr int kPlainReply = 256;
  if (p.plain) p.gen.stop = {"\n"};
  p.cap = o.n_predict >= 0 ? o.n_predict : p.plain ? kPlainReply : -1;
  // Room kept for a reply when old turns must go: the cap, at most a quarter of the context.
  p.room = std::min<int64_t>(n_ctx / 4, p.cap >= 0 ? p.cap : kPlainReply);
  return p;
}

// The user's next line: -p's on the first turn, else one read after a "> " prompt; none at end of input.
std::optional<std::string> next_line(LineReader& input, const ChatOptions& o, bool first) {
  if (first && o.has_first_message) return o.first_message;
  std::fputc('\n', stdout);
  std::optional<std::string> got = input.read("> ");
  if (got && !input.terminal()) {  // a pipe: the turn in the transcript, before any note about it on stderr
    std::printf("%s\n", got->c_str());
    std::fflush(stdout);
  }
  return got;
}

// The prompt for the conversation with the user's new turn last, old turns dropped (with a note) to
// fit; empty, with an error and the turn taken back, where the turn alone does not fit.
std::vector<int32_t> prompt_for_turn(const Engine& engine, std::vector<ChatMessage>& messages, int64_t n_ctx,
                                     int64_t reply_room) {
  int dropped = 0;
  std::vector<int32_t> ids = fit_conversation(engine, messages, n_ctx, reply_room, dropped);
  if (ids.empty()) {
    std::fprintf(stderr, "error: this turn alone does not fit in the context of %lld tokens with room for a "
                 "reply (raise -c); it was not sent\n", (long long)n_ctx);
    messages.pop_back();
    return ids;
  }
  if (dropped > 0)
    std::fprintf(stderr, "note: the conversation outgrew the context of %lld tokens: its oldest %d message%s "
                 "left it (raise -c to keep more)\n", (long long)n_ctx, dropped, dropped == 1 ? "" : "s");
  return ids;
}

// Notes on stderr about a reply that says nothing, or that the context's end cut short.
void note_reply_end(const GenerationResult& r, bool stopped_by_context_end, int64_t n_ctx) {
  if (r.finish_reason == FinishReason::Stop && r.text.find_first_not_of(" \t\r\n") == std::string::npos)
    std::fprintf(stderr, "note: the model ended its turn at once: an empty reply\n");
  if (r.finish_reason == FinishReason::Length && stopped_by_context_end)
    std::fprintf(stderr, "note: the reply stopped at the end of the context (%lld tokens; raise -c)\n",
                 (long long)n_ctx);
}

// Feeds the prompt `ids` and streams the reply to stdout (Ctrl-C stops it), then adds it to `messages`;
// returns its decode steps.
int64_t stream_reply(Context& ctx, const std::vector<int32_t>& ids, std::vector<ChatMessage>& messages, ReplyPlan& plan) {
  take_interrupt();  // one pressed while the turn was typed is not for this reply
  feed_difference(ctx, ids);
  const int64_t room = ctx.n_ctx() - ctx.n_past();
  // A Ctrl-C during the prefill: no reply at all.
  plan.gen.max_tokens = take_interrupt() ? 0 : (int)(plan.cap < 0 ? room : std::min<int64_t>(plan.cap, room));
  const GenerationResult r = ctx.generate(plan.gen, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return !take_interrupt();
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);  // before a note on stderr about the reply
  // As the next turn's prompt renders it: "assistant: " already has the space a plain reply starts with,
  // so the tokens the context holds are found again there and only the new turn is prefilled.
  messages.push_back({"assistant", plan.plain && r.text.starts_with(' ') ? r.text.substr(1) : r.text});
  note_reply_end(r, plan.gen.max_tokens == room, ctx.n_ctx());
  return decoded_steps(r);
}

}  // namespace

int chat(ChatOptions o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  pick_seed(o.sampling, o.seed_given);
  Engine engine(o.model, o.engine);
  ContextOptions co;
  co.policy = o.policy;
  co.n_ctx = chat_context(o.n_ctx, engine.info().n_ctx_train);
  Context ctx(engine, co);
  catch_interrupts();  // from here on Ctrl-C stops a reply (while the model loaded, it ended the program)
  LineReader input;
  std::fprintf(stderr, "chat with %s (%s format, context %lld tokens): /exit or end of input quits; "
               "Ctrl-C stops a reply\n", o.model.c_str(), engine.info().chat_format.c_str(), (long long)ctx.n_ctx());

  std::vector<ChatMessage> messages;
  if (!o.system_prompt.empty()) messages.push_back({"system", o.system_prompt});
  ReplyPlan plan = plan_replies(o, engine, ctx.n_ctx());
  int64_t decode_steps = 0;
  for (bool first = true;; first = false) {
    const std::optional<std::string> line = next_line(input, o, first);
    if (!line || *line == "/exit") break;
    if (line->empty()) continue;
    messages.push_back({"user", *line});
    const std::vector<int32_t> ids = prompt_for_turn(engine, messages, ctx.n_ctx(), plan.room);
    if (ids.empty()) continue;
    decode_steps += stream_reply(ctx, ids, messages, plan);
    if (o.single_turn) break;
  }
  std::fflush(stdout);
  print_speed_lines(engine, ctx, o.model, decode_steps);
  return 0;
}

}  // namespace fasa::cli
