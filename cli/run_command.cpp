// `fasa run`: generate text from a prompt, streaming it to stdout; speeds go to stderr.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "model/sampler.h"
#include "model/session.h"
#include "sparse/fasa_policy.h"
#include "util/error.h"

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
  SamplerOptions sampling;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t complete_utf8_prefix(const std::string& s) {
  size_t i = s.size();
  for (int back = 0; back < 4 && i > 0; ++back) {
    const unsigned char c = s[i - 1];
    if ((c & 0xC0) != 0x80) {  // a lead or ASCII byte: is its sequence complete?
      const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      return (s.size() - (i - 1) >= need) ? s.size() : i - 1;
    }
    --i;
  }
  return s.size();
}

int run(const RunOptions& o) {
  if (o.prompt.empty() == o.prompt_file.empty()) throw Error("give exactly one of -p PROMPT or -f FILE");
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const std::string prompt = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);

  auto model = load_model(o.model);
  const Tokenizer& tok = model->tokenizer;
  std::vector<int32_t> ids = tok.encode(prompt, tok.add_bos());
  if (ids.empty()) throw Error("the prompt is empty and the model adds no BOS token");

  SessionOptions so;
  so.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(model->config.n_ctx_train, (int64_t)ids.size() + o.n_predict);
  if ((int64_t)ids.size() + o.n_predict > so.n_ctx)
    throw Error("prompt (" + std::to_string(ids.size()) + " tokens) + " + std::to_string(o.n_predict) +
                " to generate exceed the context size " + std::to_string(so.n_ctx) + " (raise -c)");
  std::shared_ptr<TokenSelector> policy = make_selector(o.policy, *model);
  Session session(*model, so, policy);
  Sampler sampler(o.sampling);

  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  std::span<const float> logits = session.eval(ids);
  auto t1 = clock::now();

  std::string pending;  // bytes not yet printed (an unfinished UTF-8 character)
  int generated = 0;
  for (; generated < o.n_predict; ++generated) {
    const int32_t next = sampler.sample(logits);
    if (next == tok.eos() && !o.ignore_eos) break;
    pending += tok.token_text(next);
    const size_t ready = complete_utf8_prefix(pending);
    std::fwrite(pending.data(), 1, ready, stdout);
    std::fflush(stdout);
    pending.erase(0, ready);
    if (generated + 1 < o.n_predict) logits = session.eval(std::span<const int32_t>(&next, 1));
  }
  std::fwrite(pending.data(), 1, pending.size(), stdout);
  std::fputc('\n', stdout);
  auto t2 = clock::now();

  const double pp_s = std::chrono::duration<double>(t1 - t0).count();
  const double tg_s = std::chrono::duration<double>(t2 - t1).count();
  const int decode_steps = generated > 0 ? generated - (generated == o.n_predict ? 1 : 0) : 0;
  std::fprintf(stderr, "\nmodel: %s (%s, %s, %.2fM params), attn: %s, threads: %d, ctx: %lld\n", o.model.c_str(),
               model->config.arch.c_str(), model->format.c_str(), model->n_params() / 1e6, o.policy.attn.c_str(),
               omp_get_max_threads(), (long long)so.n_ctx);
  if (auto* f = dynamic_cast<const FasaSelector*>(policy.get()))
    std::fprintf(stderr, "fasa: budget %s per head, TIP reads K_dom = %.1f%% of key dims in sparse layers\n",
                 o.policy.budget.c_str(), 100 * f->kdom_share());
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s = %.1f tokens/s\n", ids.size(), pp_s, ids.size() / pp_s);
  std::fprintf(stderr, "decode: %d tokens in %.3f s = %.1f tokens/s\n", decode_steps, tg_s,
               decode_steps > 0 ? decode_steps / tg_s : 0.0);
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
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
  return {cmd, [o] { return run(*o); }};
}

}  // namespace fasa::cli
