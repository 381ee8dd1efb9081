#pragma once
// `fasa serve`: an OpenAI-compatible HTTP server over one Engine. Endpoints: POST /v1/completions,
// POST /v1/chat/completions (both with `stream`), GET /v1/models[/{id}], GET /health, GET /metrics,
// GET /slots. `parallel` slots generate at once, `queue` more requests wait, the rest get 503; a client
// that hangs up cancels its generation. Continuous batching: one scheduler thread advances every
// generating slot in each forward pass (a Batch) on all the threads; a new prompt is prefilled in
// chunks between the others' decode steps. Each slot keeps its context after a request: the next
// request that starts with the same tokens prefills only the rest (llama-server's prompt cache).
#include <memory>
#include <string>

#include "fasa/fasa.h"
#include "server/request.h"

namespace fasa {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (see Server::bind)
  int parallel = 1;            // generations at once
  int queue = 32;              // requests waiting for a slot; beyond that: 503
  int64_t n_ctx = 0;           // tokens of all slots together (each has n_ctx / parallel); 0: the model's training context
  int64_t max_prompt_tokens = 0;  // 0: a slot's context - 1
  int threads = 0;             // OpenMP threads of the shared forward passes; 0: all cores
  int batch_tokens = 256;      // tokens per forward pass (llama.cpp's -b): every decode step, then prompt chunks
  int ubatch_tokens = 0;       // one slot's prompt tokens per pass (llama.cpp's -ub); 0: batch_tokens
  int max_pause_ms = 500;      // while slots stream, a pass takes the prompt tokens that fit this long; 0: no limit
  size_t max_body_bytes = 1 << 20;
  RequestDefaults limits;
  PolicyOptions policy;        // the default policy; requests may change attn, budget, fcs, fc_sharing, fc_rank
  std::string model_name;      // reported by /v1/models and in responses
  std::string api_key;         // non-empty: requests but GET /health need "Authorization: Bearer <key>"
  std::string cors_origin;     // non-empty: allow browser requests from this origin ("*": any)
  bool log_requests = true;    // one line per request on stderr
  bool web_ui = true;          // the chat page at GET / (src/server/web/chat.html)
};

class Server {
 public:
  Server(const Engine& engine, ServerOptions opts);
  ~Server();
  // Binds the listening socket; returns the port (the chosen one when opts.port is 0).
  int bind();
  // Serves until stop(); call bind() first.
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fasa
