// `fasa run`: generate text from a prompt, streaming it to stdout; speeds go to stderr.
#include <omp.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cli/commands.h"
#include "fasa/fasa.h"

namespace fasa::cli {

namespace {

struct RunOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string prompt;
  std::string prompt_file;
  int n_predict = 64;
  int64_t n_ctx = 0;
  int threads = 0;
  PolicyOptions policy;
  bool ignore_eos = false;
  bool truncate_prompt = false;
  SamplerOptions sampling;
  std::string stats_json;  // where to write the run's figures as JSON
};

int run(const RunOptions& o) {
  if (o.prompt.empty() == o.prompt_file.empty()) throw Error("give exactly one of -p PROMPT or -f FILE");
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const std::string prompt = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);

  Engine engine(o.model);
  std::vector<int32_t> ids = engine.tokenize(prompt, true);
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");
  const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(engine.info().n_ctx_train, (int64_t)ids.size() + o.n_predict);
  const bool truncate = (int64_t)ids.size() + o.n_predict > n_ctx && o.truncate_prompt && n_ctx - o.n_predict >= 2;
  if (truncate) {
    // Keep the first token (BOS) and the most recent ones.
    const size_t keep = n_ctx - o.n_predict - 1, before = ids.size();
    ids.erase(ids.begin() + 1, ids.end() - keep);
    std::fprintf(stderr, "prompt truncated: kept the first and the last %zu of %zu tokens\n", keep, before);
  }
  if ((int64_t)ids.size() + o.n_predict > n_ctx)
    throw Error("prompt (" + std::to_string(ids.size()) + " tokens) + " + std::to_string(o.n_predict) +
                " to generate exceed the context size " + std::to_string(n_ctx) + " (raise -c, or --truncate-prompt)");
  ContextOptions co;
  co.policy = o.policy;
  co.n_ctx = n_ctx;
  Context ctx(engine, co);

  const std::string shown = truncate ? "..." + engine.detokenize(ids) : prompt;  // the text the model sees
  std::fputs(shown.c_str(), stdout);
  std::fflush(stdout);
  ctx.feed_tokens(ids);
  GenerationOptions gen;
  gen.max_tokens = o.n_predict;
  gen.sampling = o.sampling;
  gen.ignore_eos = o.ignore_eos;
  const GenerationResult r = ctx.generate(gen, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);

  const ContextStats& st = ctx.stats();
  // Tokens evaluated after the prompt: the last one sampled is not, unless an end token came after it.
  const int64_t decode_steps = r.finish_reason == "length" ? std::max(0, r.n_tokens - 1) : r.n_tokens;
  std::fprintf(stderr, "\nmodel: %s (%s, %s, %.2fM params), attn: %s, threads: %d, ctx: %lld\n", o.model.c_str(),
               engine.info().arch.c_str(), engine.info().format.c_str(), engine.info().n_params / 1e6,
               ctx.policy_summary().c_str(), omp_get_max_threads(), (long long)n_ctx);
  std::fprintf(stderr, "prompt: %lld tokens in %.3f s = %.1f tokens/s\n", (long long)st.prompt_tokens,
               st.prompt_seconds, st.prompt_tokens / st.prompt_seconds);
  std::fprintf(stderr, "decode: %lld tokens in %.3f s = %.1f tokens/s\n", (long long)decode_steps, st.decode_seconds,
               decode_steps > 0 ? decode_steps / st.decode_seconds : 0.0);
  const KvMemory mem = ctx.kv_memory();
  std::fprintf(stderr, "%s\n", kv_memory_line(mem).c_str());
  if (!o.stats_json.empty()) {
    nlohmann::json j = kv_memory_json(mem);
    j.update({{"model", o.model}, {"attn", ctx.policy_summary()}, {"kv_offload", o.policy.kv_offload},
              {"n_ctx", n_ctx}, {"prompt_tokens", st.prompt_tokens}, {"prompt_seconds", st.prompt_seconds},
              {"decode_tokens", decode_steps}, {"decode_seconds", st.decode_seconds}});
    std::ofstream out(o.stats_json);
    if (!(out << j.dump(2) << "\n")) fail(o.stats_json, "cannot write the stats");
  }
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  cmd->add_option("-m,--model", o->model, "Model: a .gguf file or a Hugging Face directory")
      ->capture_default_str();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-c,--ctx-size", o->n_ctx, "Context size (default: prompt + n, at most the model's)")
      ->check(CLI::Range((int64_t)1, (int64_t)1 << 24));
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(1, 1024));
  add_policy_options(cmd, o->policy);
  cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k sampling; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (nucleus) sampling; 1 = off")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--stats-json", o->stats_json,
                  "Write the run's speeds and KV memory (kv_fast_bytes, kv_slow_bytes, kv_full_bytes, rss_bytes) to FILE");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  cmd->add_flag("--truncate-prompt", o->truncate_prompt,
                "Drop the oldest prompt tokens (keeping BOS) when prompt + n exceed the context, instead of failing");
  return {cmd, [o] { return run(*o); }};
}

}  // namespace fasa::cli
