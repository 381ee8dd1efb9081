#include "server/server.h"

#include <httplib.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>

#include "server/admission.h"
#include "server/metrics.h"
#include "server/sockets.h"

namespace fasa {

namespace {

using json = nlohmann::json;

// Generated text may hold bytes that are not UTF-8; they are replaced rather than failing the reply.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(int status, const std::string& message) {
  const char* type = status == 503 ? "unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(dump(error_body(status, message)), "application/json");
}

// A request refused with an HTTP status (400, 503) and a message for the JSON error body.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

// Releases the admission slot when the request's last owner (handler or stream) is done.
struct Slot {
  explicit Slot(Admission& a) : admission(a) {}
  ~Slot() { admission.leave(); }
  Admission& admission;
};

// One accepted completion request, ready to generate.
struct Job {
  CompletionRequest request;
  std::vector<int32_t> prompt;  // token ids
  std::string id;
  int64_t created = 0;
  std::shared_ptr<Slot> slot;
  PeerSocket peer;
};

// OpenAI's token counts of one reply.
json usage(const Job& job, const GenerationResult& r) {
  const int64_t n_prompt = (int64_t)job.prompt.size();
  return {{"prompt_tokens", n_prompt}, {"completion_tokens", r.n_tokens}, {"total_tokens", n_prompt + r.n_tokens}};
}

}  // namespace

struct Server::Impl {
  Impl(const Engine& e, ServerOptions o)
      : engine(e), opts(std::move(o)), admission(opts.parallel, opts.queue) {}

  const Engine& engine;
  ServerOptions opts;
  Admission admission;
  ServerMetrics metrics;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  int threads_per_slot = 1;

  void routes();
  void complete(const httplib::Request& req, httplib::Response& res, bool chat);
  std::shared_ptr<Job> accept(const httplib::Request& req, bool chat);
  GenerationResult generate(Job& job, const TextCallback& on_text);
  json completion_body(const Job& job, const GenerationResult& r) const;
  json chunk(const Job& job, const json& choice) const;
  bool stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink);
};

Server::Server(const Engine& engine, ServerOptions opts) : impl_(std::make_unique<Impl>(engine, std::move(opts))) {
  Impl& s = *impl_;
  if (s.opts.parallel < 1 || s.opts.queue < 0) throw Error("--parallel must be >= 1 and --queue >= 0");
  if (s.opts.n_ctx <= 0) s.opts.n_ctx = engine.info().n_ctx_train;
  if (s.opts.max_prompt_tokens <= 0 || s.opts.max_prompt_tokens >= s.opts.n_ctx) s.opts.max_prompt_tokens = s.opts.n_ctx - 1;
  if (s.opts.model_name.empty()) s.opts.model_name = engine.info().path;
  engine.check_policy(s.opts.policy);
  const int threads = s.opts.threads > 0 ? s.opts.threads : omp_get_max_threads();
  s.threads_per_slot = std::max(1, threads / s.opts.parallel);
  // Threads for every running and waiting request, plus a few for /health and /metrics.
  const int pool = s.opts.parallel + s.opts.queue + 4;
  s.http.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  s.http.set_payload_max_length(s.opts.max_body_bytes);
  s.http.set_socket_options(exclusive_listen_options);
  s.routes();
}

Server::~Server() = default;

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.opts.port == 0 ? s.http.bind_to_any_port(s.opts.host)
                                    : (s.http.bind_to_port(s.opts.host, s.opts.port) ? s.opts.port : -1);
  if (port < 0) throw Error(s.opts.host + ":" + std::to_string(s.opts.port) + ": cannot listen (address in use or not local)");
  raise_listen_backlog(port, 1024);
  return port;
}

void Server::run() { impl_->http.listen_after_bind(); }
void Server::stop() { impl_->http.stop(); }

void Server::Impl::routes() {
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const ModelInfo& m = engine.info();
    json model = {{"id", opts.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "fasa"},
                  {"meta", {{"arch", m.arch}, {"format", m.format}, {"n_params", m.n_params}, {"n_ctx", opts.n_ctx},
                            {"n_vocab", m.n_vocab}, {"chat_format", m.chat_format}, {"attn", opts.policy.attn}}}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(admission.active(), admission.waiting()), "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); });
  // Unknown paths, oversized bodies and the like: the same JSON error shape as our own errors.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, res.status, res.status == 404   ? "no such endpoint"
                                : res.status == 413 ? "request body too large"
                                                    : "request failed (HTTP " + std::to_string(res.status) + ")");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics.count_response(res.status); });
}

// Parses and checks a request, tokenizes its prompt and takes a slot; throws HttpError.
std::shared_ptr<Job> Server::Impl::accept(const httplib::Request& req, bool chat) {
  auto job = std::make_shared<Job>();
  try {
    job->request = parse_completion_request(req.body, chat, opts.limits, opts.policy);
    engine.check_policy(job->request.policy);
  } catch (const std::exception& e) {  // BadRequest, or fasa::Error for an unknown policy or bad budget
    throw HttpError(400, e.what());
  }
  CompletionRequest& r = job->request;
  if (chat) {
    job->prompt = engine.tokenize(engine.chat_prompt(r.messages), true, /*parse_special=*/true);
  } else if (!r.prompt_ids.empty()) {
    for (int32_t t : r.prompt_ids)
      if (t >= engine.info().n_vocab) throw HttpError(400, "'prompt' token id " + std::to_string(t) + " is outside the vocabulary");
    job->prompt = r.prompt_ids;
  } else {
    job->prompt = engine.tokenize(r.prompt, true);
  }
  const int64_t n = (int64_t)job->prompt.size();
  if (n == 0) throw HttpError(400, "the prompt is empty");
  if (n > opts.max_prompt_tokens)
    throw HttpError(400, "the prompt has " + std::to_string(n) + " tokens; this server takes at most " +
                             std::to_string(opts.max_prompt_tokens));
  // The reply ends with finish_reason "length" where the context runs out.
  r.gen.max_tokens = (int)std::min<int64_t>(r.gen.max_tokens, opts.n_ctx - n);

  if (!admission.enter()) throw HttpError(503, "the server is busy: all slots and the queue are taken; retry later");
  job->slot = std::make_shared<Slot>(admission);
  job->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  job->created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  job->peer = PeerSocket(req.local_port, req.remote_addr, req.remote_port);
  return job;
}

GenerationResult Server::Impl::generate(Job& job, const TextCallback& on_text) {
  ContextOptions co;
  co.policy = job.request.policy;
  co.n_ctx = (int64_t)job.prompt.size() + job.request.gen.max_tokens;
  co.threads = threads_per_slot;
  Context ctx(engine, co);
  ctx.feed_tokens(job.prompt);
  GenerationResult r = ctx.generate(job.request.gen, [&](std::string_view piece) {
    return !job.peer.closed() && (!on_text || on_text(piece));
  });
  const ContextStats& st = ctx.stats();
  metrics.count_generation(st.prompt_tokens, st.generated_tokens, st.prompt_seconds, st.decode_seconds,
                           r.finish_reason == "cancelled");
  return r;
}

json Server::Impl::completion_body(const Job& job, const GenerationResult& r) const {
  const bool chat = job.request.chat;
  json choice = chat ? json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", r.text}}}, {"finish_reason", r.finish_reason}}
                     : json{{"index", 0}, {"text", r.text}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
  return {{"id", job.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", job.created},
          {"model", opts.model_name},
          {"choices", json::array({choice})},
          {"usage", usage(job, r)},
          {"timings", {{"predicted_n", r.n_tokens}, {"predicted_ms", r.seconds * 1e3},
                       {"predicted_per_second", r.seconds > 0 ? r.n_tokens / r.seconds : 0.0}}},
          {"attn", job.request.policy.attn}};
}

json Server::Impl::chunk(const Job& job, const json& choice) const {
  return {{"id", job.id},
          {"object", job.request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", job.created},
          {"model", opts.model_name},
          {"choices", json::array({choice})}};
}

// Server-sent events: one chunk per piece of text, a last chunk with finish_reason, then [DONE].
// False when the client went away.
bool Server::Impl::stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink) {
  const bool chat = job->request.chat;
  auto send = [&](const json& j) {
    const std::string event = "data: " + dump(j) + "\n\n";
    return sink.write(event.data(), event.size());
  };
  auto piece_choice = [&](std::string_view text) {
    return chat ? json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", nullptr}}
                : json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  };
  if (chat && !send(chunk(*job, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}})))
    return false;
  GenerationResult r;
  try {
    r = generate(*job, [&](std::string_view piece) { return send(chunk(*job, piece_choice(piece))); });
  } catch (const std::exception& e) {
    send(error_body(500, e.what()));
    sink.done();
    return true;
  }
  if (r.finish_reason == "cancelled") return false;
  json last = chat ? json{{"index", 0}, {"delta", json::object()}, {"finish_reason", r.finish_reason}}
                   : json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
  json end = chunk(*job, last);
  end["usage"] = usage(*job, r);
  const std::string done = "data: [DONE]\n\n";
  if (!send(end) || !sink.write(done.data(), done.size())) return false;
  sink.done();
  return true;
}

void Server::Impl::complete(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::shared_ptr<Job> job;
  try {
    job = accept(req, chat);
    if (!job->request.stream) {
      const GenerationResult r = generate(*job, {});
      if (r.finish_reason == "cancelled") {  // nobody is listening
        res.status = 499;                     // "client closed request", for the metrics
        return;
      }
      res.set_content(dump(completion_body(*job, r)), "application/json");
      return;
    }
  } catch (const HttpError& e) {
    return send_error(res, e.status, e.what());
  } catch (const std::exception& e) {
    return send_error(res, 500, e.what());
  }
  res.set_chunked_content_provider("text/event-stream", [this, job](size_t, httplib::DataSink& sink) { return stream(job, sink); });
}

}  // namespace fasa
