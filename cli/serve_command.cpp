// `fasa serve`: the OpenAI-compatible HTTP server (src/server/).
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "server/server.h"

namespace fasa::cli {

namespace {

struct ServeOptions {
  std::string model = FASA_DEFAULT_MODEL;
  ServerOptions server;
  EngineOptions engine;  // the mapping flags' (serve runs on the CPU)
};

Server* running_server = nullptr;

int serve(ServeOptions o, bool attn_given) {
  // A profile (a file or 'auto') without --attn means the user wants FASA served.
  if (!attn_given && !o.server.policy.profile.empty()) o.server.policy.attn = kFasaAttn;
  Engine engine(o.model, o.engine);
  o.server.model_name = std::filesystem::path(o.model).filename().string();
  Server server(engine, o.server);
  const int port = server.bind();
  std::fprintf(stderr, "fasa serve: %s (%s) on http://%s:%d — %d parallel, queue %d, attn %s%s%s\n", o.model.c_str(),
               engine.info().arch.c_str(), o.server.host.c_str(), port, o.server.parallel, o.server.queue,
               o.server.policy.attn.c_str(), o.server.api_key.empty() ? "" : ", API key required",
               o.server.web_ui ? "; chat page at /" : "");
  running_server = &server;
  std::signal(SIGINT, [](int) { running_server->stop(); });
  std::signal(SIGTERM, [](int) { running_server->stop(); });
  server.run();
  running_server = nullptr;
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  ServerOptions& s = o->server;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  add_model_option(cmd, o->model);
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", s.parallel, "Slots generating at once (llama.cpp's -np); each keeps its prompt cache")
      ->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--queue", s.queue, "Requests that may wait for a slot; more get 503")->capture_default_str()
      ->check(CLI::Range(0, 4096));
  add_ctx_option(cmd, s.n_ctx, "Context of all slots together, each getting an equal share, as llama-server's (default or 0: the model's)", 0);
  cmd->add_option("--max-prompt-tokens", s.max_prompt_tokens, "Longest prompt accepted (default: context - 1)")
      ->check(CLI::Range((int64_t)1, (int64_t)1 << 24));
  add_n_predict_option(cmd, s.limits.max_tokens, "max_tokens of a request that gives none", 1);
  cmd->add_option("--max-tokens-limit", s.limits.max_tokens_limit, "Largest max_tokens a request may ask for")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--echo-policy", s.limits.echo_policy,
                "An echoed prompt's log-probabilities from decode steps under the request's policy unless it says "
                "\"echo_policy\": false (for harnesses such as lm-evaluation-harness that cannot send the field)");
  add_threads_option(cmd, s.threads, "Threads of the forward passes all slots share (default: all cores)");
  cmd->add_option("-b,--batch-size", s.batch_tokens,
                  "Tokens per forward pass: every generating slot's next token, then prompt chunks in the room left")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--ubatch-size", s.ubatch_tokens, "One slot's prompt tokens per pass (llama.cpp's -ub; 0: --batch-size)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--max-pause-ms", s.max_pause_ms,
                  "While slots stream, a prompt is prefilled in chunks that keep each pass (each pause of their "
                  "streams) under this long, from measured pass times; 0: only --batch-size bounds a pass")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' on every request but /health")
      ->envname("FASA_API_KEY");
  cmd->add_option("--cors", s.cors_origin, "Allow browser requests from this origin ('*': any)");
  cmd->add_option("--max-body-bytes", s.max_body_bytes, "Largest request body; larger ones get 413")
      ->capture_default_str()->check(CLI::Range((size_t)1024, (size_t)1 << 30));
  cmd->add_flag_callback("--log-disable", [o] { o->server.log_requests = false; }, "No line per request on stderr");
  cmd->add_flag_callback("--no-webui", [o] { o->server.web_ui = false; }, "No chat page at / (llama-server's --no-webui)");
  add_policy_options(cmd, s.policy);
  add_mapping_options(cmd, o->engine);
  add_ignored_llama_options(cmd, kGpuFlags | kServerFlags);
  return {cmd, [o, cmd] { return serve(*o, cmd->count("--attn") > 0); }};
}

}  // namespace fasa::cli
