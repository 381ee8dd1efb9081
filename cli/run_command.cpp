// `fasa run`: generate text from a prompt, streaming it to stdout; speeds go to stderr.
#include <omp.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

#include "cli/chat.h"
#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/speed_lines.h"
#include "api/kv_memory_report.h"
#include "fasa/fasa.h"

namespace fasa::cli {

namespace {

struct RunOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string prompt;
  std::string prompt_file;     // "-": standard input
  bool prompt_given = false;   // -p, even -p ""
  bool escape = false;         // -e: \n, \t, \\ ... in -p
  bool display_prompt = true;
  bool seed_given = false;
  int n_predict = 64;          // -1: until the end of the context or an end token
  bool n_predict_given = false;
  int64_t n_ctx = -1;          // -1: prompt + n, at most the model's; 0: the model's
  // Conversation (llama-cli's -cnv / -no-cnv): on, off, or on where no prompt is given and standard
  // input is a terminal.
  enum class Conversation { Auto, On, Off } conversation = Conversation::Auto;
  std::string system_prompt;   // -sys (a conversation)
  bool single_turn = false;    // -st (a conversation)
  int threads = 0;
  EngineOptions engine;        // -ngl, --device
  PolicyOptions policy;
  bool ignore_eos = false;
  bool truncate_prompt = false;
  SamplerOptions sampling;
  std::string stats_json;  // where to write the run's figures as JSON
};

// llama.cpp's -e: the escapes a shell makes awkward to type.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    switch (const char c = s[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': case '\'': case '"': out += c; break;
      default: out += '\\'; out += c;
    }
  }
  return out;
}

std::string read_prompt(const RunOptions& o) {
  if (o.prompt_given == !o.prompt_file.empty()) throw Error("give exactly one of -p PROMPT or -f FILE");
  if (o.prompt_given) return o.escape ? unescape(o.prompt) : o.prompt;
  return read_text_or_stdin(o.prompt_file);
}

// The options of a conversation: the prompt, if any, is its first user turn.
ChatOptions chat_options(const RunOptions& o) {
  ChatOptions c;
  c.model = o.model;
  c.system_prompt = o.system_prompt;
  c.has_first_message = o.prompt_given || !o.prompt_file.empty();
  if (c.has_first_message) c.first_message = read_prompt(o);
  c.n_ctx = o.n_ctx;
  c.n_predict = o.n_predict_given ? o.n_predict : -1;  // without -n a reply runs to its end
  c.threads = o.threads;
  c.single_turn = o.single_turn;
  c.policy = o.policy;
  c.engine = o.engine;
  c.sampling = o.sampling;
  c.seed_given = o.seed_given;
  return c;
}

bool wants_conversation(const RunOptions& o) {
  using C = RunOptions::Conversation;
  const bool chat_flags = !o.system_prompt.empty() || o.single_turn;
  if (o.conversation == C::Off) {
    if (chat_flags) throw Error("-sys and -st belong to a conversation, which -no-cnv turns off");
    return false;
  }
  const bool prompt = o.prompt_given || !o.prompt_file.empty();
  return o.conversation == C::On || chat_flags || (!prompt && isatty(STDIN_FILENO));
}

// The context for the prompt and -n: its size (-c, else the prompt and -n up to the model's), the
// prompt cut to fit where --truncate-prompt asks (its first token and the newest), and -n cut to the
// context's end otherwise.
struct FittedContext {
  int64_t n_ctx = 0;
  bool truncated = false, stops_at_context_end = false;
};
FittedContext fit_context(RunOptions& o, std::vector<int32_t>& ids, int64_t n_train) {
  if (o.n_ctx > n_train && n_train > 0)
    std::fprintf(stderr, "warning: -c %lld is above the %lld tokens the model was trained on; quality usually falls past it\n",
                 (long long)o.n_ctx, (long long)n_train);
  const int64_t n_prompt = (int64_t)ids.size();
  FittedContext f;
  f.n_ctx = o.n_ctx > 0                        ? o.n_ctx
            : o.n_ctx == 0 || o.n_predict < 0 ? n_train  // -c 0: the model's, as llama.cpp
                                               : std::min<int64_t>(n_train, n_prompt + o.n_predict);
  f.truncated = o.truncate_prompt && o.n_predict >= 0 && n_prompt + o.n_predict > f.n_ctx && f.n_ctx - o.n_predict >= 2;
  if (f.truncated) {
    // Keep the first token (BOS) and the most recent ones.
    const size_t keep = f.n_ctx - o.n_predict - 1, before = ids.size();
    ids.erase(ids.begin() + 1, ids.end() - keep);
    std::fprintf(stderr, "prompt truncated: kept the first and the last %zu of %zu tokens\n", keep, before);
  } else if (o.n_predict < 0 || n_prompt + o.n_predict > f.n_ctx) {  // generation stops at the end of the context
    if (n_prompt > f.n_ctx || (n_prompt == f.n_ctx && o.n_predict != 0))
      throw Error("prompt (" + std::to_string(n_prompt) + " tokens) leaves no room in the context size " +
                  std::to_string(f.n_ctx) + (o.truncate_prompt ? " (raise -c)" : " (raise -c, or --truncate-prompt)"));
    o.n_predict = (int)std::max<int64_t>(0, f.n_ctx - n_prompt);
    f.stops_at_context_end = true;
  }
  return f;
}

// Feeds the prompt and streams the continuation to stdout until its end or Ctrl-C.
GenerationResult stream_to_stdout(Context& ctx, const std::vector<int32_t>& ids, const GenerationOptions& gen) {
  GenerationResult r;
  try {
    ctx.feed_tokens(ids);
    r = ctx.generate(gen, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !take_interrupt();
    });
  } catch (...) {  // the error goes on a line of its own, not after the streamed text
    std::fputc('\n', stdout);
    std::fflush(stdout);
    throw;
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return r;
}

void write_stats_json(const RunOptions& o, const Context& ctx, int64_t n_ctx, int64_t decode_steps) {
  const ContextStats st = ctx.stats();
  nlohmann::json j = kv_memory_json(ctx.kv_memory());
  j.update({{"model", o.model}, {"attn", ctx.policy_summary()}, {"kv_offload", offload_str(o.policy.cache.offload)},
            {"n_ctx", n_ctx}, {"prompt_tokens", st.prompt_tokens}, {"prompt_seconds", st.prompt_seconds},
            {"decode_tokens", decode_steps}, {"decode_seconds", st.decode_seconds}});
  std::ofstream out(o.stats_json);
  if (!(out << j.dump(2) << "\n")) fail(o.stats_json, "cannot write the stats");
}

int run(RunOptions o) {
  if (wants_conversation(o)) return chat(chat_options(o));
  const std::string prompt = read_prompt(o);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  pick_seed(o.sampling, o.seed_given);

  Engine engine(o.model, o.engine);
  std::vector<int32_t> ids = engine.tokenize(prompt, true);
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");
  const FittedContext fit = fit_context(o, ids, engine.info().n_ctx_train);
  ContextOptions co;
  co.policy = o.policy;
  co.n_ctx = fit.n_ctx;
  Context ctx(engine, co);

  catch_interrupts();  // Ctrl-C ends the generation: what came, then the speed lines
  const std::string shown = fit.truncated ? "..." + engine.detokenize(ids) : prompt;  // the text the model sees
  if (o.display_prompt) std::fputs(shown.c_str(), stdout);
  std::fflush(stdout);
  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.sampling = o.sampling;
  gen.ignore_eos = o.ignore_eos;
  const GenerationResult r = stream_to_stdout(ctx, ids, gen);
  if (r.finish_reason == FinishReason::Length && fit.stops_at_context_end && o.n_predict > 0)
    std::fprintf(stderr, "note: generation stopped at the end of the context (%lld tokens; raise -c)\n", (long long)fit.n_ctx);

  const int64_t decode_steps = decoded_steps(r);
  print_speed_lines(engine, ctx, o.model, decode_steps);
  if (!o.stats_json.empty()) write_stats_json(o, ctx, fit.n_ctx, decode_steps);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_option(cmd, o->model);
  cmd->add_option_function<std::string>(
      "-p,--prompt", [o](const std::string& p) { o->prompt = p, o->prompt_given = true; }, "Prompt text");
  cmd->add_flag("-e,--escape", o->escape, "Process escapes (\\n, \\t, \\\\, \\', \\\") in the prompt");
  add_file_option(cmd, o->prompt_file, "Read the prompt from a file ('-': standard input)");
  cmd->add_flag_callback("--no-display-prompt", [o] { o->display_prompt = false; }, "Do not echo the prompt before the generated text");
  CLI::Option* n = add_n_predict_option(cmd, o->n_predict, "Tokens to generate (-1: until the end of the context)", -1);
  add_ctx_option(cmd, o->n_ctx, "Context size (default: prompt + n, at most the model's; 0: the model's)", 0);
  add_generation_options(cmd, o->threads, o->engine, o->policy, o->sampling, o->seed_given);
  cmd->add_option("--stats-json", o->stats_json,
                  "Write the run's speeds and KV memory (kv_fast_bytes, kv_slow_bytes, kv_full_bytes, rss_bytes) to FILE");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("--truncate-prompt", o->truncate_prompt,
                "Drop the oldest prompt tokens (keeping BOS) when prompt + n exceed the context, instead of failing");
  using C = RunOptions::Conversation;
  cmd->add_flag_callback("--conversation", [o] { o->conversation = C::On; },
                         "A conversation in the model's chat format (llama-cli's -cnv; as `fasa chat`): the prompt, "
                         "if any, is the first turn");
  cmd->add_flag_callback("--no-conversation", [o] { o->conversation = C::Off; },
                         "Never a conversation, even with no prompt on a terminal (llama-cli's -no-cnv)");
  add_conversation_options(cmd, o->system_prompt, o->single_turn);
  return {cmd, [o, n] {
            o->n_predict_given = n->count() > 0;
            return run(*o);
          }};
}

}  // namespace fasa::cli
