#include "server/server.h"

#include <httplib.h>
#include <omp.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <nlohmann/json.hpp>

#include "server/admission.h"
#include "server/chat_page.h"
#include "server/metrics.h"
#include "server/sockets.h"
#include "sparse/policy.h"

namespace fasa {

namespace {

using json = nlohmann::json;

// Generated text may hold bytes that are not UTF-8; they are replaced rather than failing the reply.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// OpenAI's error shape: message, type, and the request field at fault (`param`) and a machine-readable
// `code` (e.g. "context_length_exceeded"), each null where there is none.
json error_body(int status, const std::string& message, const std::string& param = "", const std::string& code = "") {
  const char* type = status == 503 ? "unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error";
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.status = status;
  res.set_content(dump(error_body(status, message, param, code)), "application/json");
}

// A request refused with an HTTP status (400, 503) and a message for the JSON error body.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param, code;
};

using Clock = std::chrono::steady_clock;

// What the request log line says about the request this thread serves (handler, stream and logger of
// one request run on one thread).
struct RequestLog {
  Clock::time_point start;
  int64_t prompt_tokens = -1, cached_tokens = 0, generated_tokens = 0;
  bool cancelled = false;  // the generation was cancelled (the client went away): logged as nginx's 499, not the 200 sent
};
thread_local RequestLog request_log;

// What GET /slots shows of a slot, written by the request that holds it.
struct SlotView {
  bool processing = false;
  int64_t n_ctx = 0;            // the slot's cache now (0: none yet)
  int64_t n_past = 0;           // tokens it holds: the last request's prompt and reply (its prompt cache)
  int64_t prompt_tokens = 0, cached_tokens = 0;  // of the request now or last
  std::string attn;
  std::string id;               // the request now or last
};

// A slot: one generation at a time. Its context stays after the request (prompt cache).
struct SlotState {
  std::unique_ptr<Context> ctx;
  PolicyOptions policy;   // the one ctx was made with
  int64_t reusable = 0;   // tokens of ctx a later prompt may reuse: those prefilled densely (or all, for full attention)
  uint64_t last_used = 0;
};

// Gives the admission slot back when the request's last owner (handler or stream) is done.
struct SlotLease {
  SlotLease(Admission& a, int index) : admission(a), index(index) {}
  ~SlotLease() { admission.leave(index); }
  Admission& admission;
  int index;
};

// One accepted completion request, ready to generate.
struct Job {
  CompletionRequest request;
  std::vector<int32_t> prompt;  // token ids
  std::string id;
  int64_t created = 0;
  std::shared_ptr<SlotLease> slot;
  PeerSocket peer;
  int64_t cached_tokens = 0;                 // prompt tokens the slot's cache already held
  std::vector<TokenLogprob> prompt_logprobs;  // echo with logprobs: [prompt.size()]
  double prompt_seconds = 0;
  uint64_t prompt_kv_bytes = 0;              // KV bytes read scoring an echoed prompt (in prepare)
  double decode_kv_bytes_per_token = 0;      // KV bytes attention read per decode step (the policy's saving)
};

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return (int64_t)i;
}

// OpenAI's token counts of one reply.
json usage(const Job& job, const GenerationResult& r) {
  const int64_t n_prompt = (int64_t)job.prompt.size();
  return {{"prompt_tokens", n_prompt},
          {"completion_tokens", r.n_tokens},
          {"total_tokens", n_prompt + r.n_tokens},
          {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens}}}};
}

// llama-server's `timings` of a reply.
json timings(const Job& job, const GenerationResult& r) {
  const int64_t prompt_n = (int64_t)job.prompt.size() - job.cached_tokens;
  return {{"cache_n", job.cached_tokens}, {"prompt_n", prompt_n}, {"prompt_ms", job.prompt_seconds * 1e3},
          {"prompt_per_second", job.prompt_seconds > 0 ? prompt_n / job.prompt_seconds : 0.0},
          {"predicted_n", r.n_tokens}, {"predicted_ms", r.seconds * 1e3},
          {"predicted_per_second", r.seconds > 0 ? r.n_tokens / r.seconds : 0.0},
          {"kv_bytes_per_token", job.decode_kv_bytes_per_token}};
}

// A random hex string, so response ids differ across restarts of the server.
std::string random_hex(int n) {
  std::random_device rd;
  std::mt19937_64 g(((uint64_t)rd() << 32) ^ rd() ^ (uint64_t)Clock::now().time_since_epoch().count());
  std::string s;
  for (int i = 0; i < n; ++i) s += "0123456789abcdef"[g() & 15];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Server::Impl {
  Impl(const Engine& e, ServerOptions o)
      : engine(e), opts(std::move(o)), admission(opts.parallel, opts.queue), slots(opts.parallel), views(opts.parallel) {}

  const Engine& engine;
  ServerOptions opts;
  Admission admission;
  std::vector<SlotState> slots;  // [parallel]; a slot is touched only by the request holding it
  ServerMetrics metrics;
  httplib::Server http;
  const std::string id_prefix = random_hex(8);
  const int64_t started = unix_now();
  std::atomic<uint64_t> next_id{1}, next_use{1};
  int64_t slot_ctx = 0;  // tokens per slot

  // The scheduler: one thread steps a Batch of every slot that is generating, so all of them advance in
  // each forward pass on all the threads; request threads hand their work over (incoming) and wait
  // for its text (Handoff).
  std::mutex sched_mu;
  std::condition_variable sched_wake;
  std::vector<std::function<void(Batch&)>> incoming;  // run on the scheduler thread before its next pass
  std::atomic<bool> stopping{false};  // read by the generations' callbacks on the scheduler thread
  std::mutex views_mu;
  std::vector<SlotView> views;  // [parallel], under views_mu
  void show_slot(const Job& job, bool processing);
  std::atomic<int> batch_members{0};
  std::atomic<int64_t> batch_prefilling{0};
  std::thread scheduler;
  void schedule();

  void routes();
  json model_object() const;
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  httplib::Server::Handler guarded(httplib::Server::Handler handler) const;
  void post(const char* path, httplib::Server::Handler handler);
  void complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  std::shared_ptr<Job> accept(const httplib::Request& req, Endpoint endpoint);
  Context& prepare(Job& job, std::vector<int32_t>& to_feed);
  // Gets each piece of text with the log-probabilities of the tokens it completes; false: stop.
  using PieceCallback = std::function<bool(std::string_view text, std::span<const TokenLogprob> logprobs)>;
  GenerationResult generate(Job& job, const PieceCallback& on_piece_sent);
  json slots_json();
  json token_json(const TokenLogprob& t, bool chat) const;
  // Where the next token's text starts in the reply's text, and how many bytes of the coming tokens'
  // texts the reply does not have (an echoed prompt's first word loses its SentencePiece space).
  struct TextOffset {
    size_t at = 0, unseen = 0;
  };
  json logprobs_json(bool chat, std::span<const TokenLogprob> logprobs, TextOffset& offset) const;
  TextOffset first_offset(const Job& job) const;
  json completion_body(const Job& job, const GenerationResult& r) const;
  json llama_body(const Job& job, const GenerationResult& r) const;
  json chunk(const Job& job, const json& choice) const;
  bool stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink);
};

Server::Server(const Engine& engine, ServerOptions opts) : impl_(std::make_unique<Impl>(engine, std::move(opts))) {
  Impl& s = *impl_;
  if (s.opts.parallel < 1 || s.opts.queue < 0) throw Error("--parallel must be >= 1 and --queue >= 0");
  if (s.opts.n_ctx <= 0) s.opts.n_ctx = engine.info().n_ctx_train;
  s.slot_ctx = s.opts.n_ctx / s.opts.parallel;  // as llama-server: -c is shared by the slots
  if (s.slot_ctx < 2)
    throw Error("a context of " + std::to_string(s.opts.n_ctx) + " tokens leaves less than 2 per slot for " +
                std::to_string(s.opts.parallel) + " parallel slots: raise -c (shared by the slots) or lower -np");
  if (s.opts.max_prompt_tokens <= 0 || s.opts.max_prompt_tokens >= s.slot_ctx) s.opts.max_prompt_tokens = s.slot_ctx - 1;
  if (s.opts.model_name.empty()) s.opts.model_name = engine.info().path;
  engine.check_policy(s.opts.policy);
  if (s.opts.batch_tokens < 1 || s.opts.ubatch_tokens < 0) throw Error("--batch-size must be >= 1 and --ubatch-size >= 0");
  // Threads for every running and waiting request, plus a few for /health and /metrics.
  const int pool = s.opts.parallel + s.opts.queue + 4;
  s.http.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  s.http.set_payload_max_length(s.opts.max_body_bytes);
  s.http.set_socket_options(exclusive_listen_options);
  s.routes();
  s.scheduler = std::thread([&s] { s.schedule(); });
}

Server::~Server() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.sched_mu);
    s.stopping = true;
  }
  s.sched_wake.notify_all();
  s.scheduler.join();
}

void Server::Impl::schedule() {
  Batch batch({.max_pass_tokens = opts.batch_tokens,
               .max_prompt_chunk = opts.ubatch_tokens,
               .threads = opts.threads,
               .max_pass_seconds = opts.max_pause_ms / 1000.0});
  for (;;) {
    std::vector<std::function<void(Batch&)>> adds;
    {
      std::unique_lock lock(sched_mu);
      sched_wake.wait(lock, [&] { return stopping || !incoming.empty() || batch.size() > 0; });
      if (stopping && incoming.empty() && batch.size() == 0) return;
      adds.swap(incoming);
    }
    for (auto& add : adds) add(batch);
    try {
      batch.step();  // while stopping, the members' callbacks cancel them
    } catch (const std::exception& e) {  // Batch fails members, not itself: this would be a bug
      std::fprintf(stderr, "error: the batch scheduler: %s\n", e.what());
    }
    batch_members = (int)batch.size();
    batch_prefilling = batch.prefilling();
  }
}

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.opts.port == 0 ? s.http.bind_to_any_port(s.opts.host)
                                    : (s.http.bind_to_port(s.opts.host, s.opts.port) ? s.opts.port : -1);
  if (port < 0) throw Error(s.opts.host + ":" + std::to_string(s.opts.port) + ": cannot listen (address in use or not local)");
  raise_listen_backlog(port, 1024);
  return port;
}

void Server::run() { impl_->http.listen_after_bind(); }

// Called from signal handlers: no lock here. Running generations end at their next token
// ("cancelled"); the destructor wakes the scheduler to finish.
void Server::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

json Server::Impl::model_object() const {
  const ModelInfo& m = engine.info();
  return {{"id", opts.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "fasa"},
          {"meta", {{"arch", m.arch}, {"format", m.format}, {"n_params", m.n_params}, {"n_ctx", opts.n_ctx},
                    {"n_ctx_slot", slot_ctx}, {"n_ctx_train", m.n_ctx_train}, {"n_vocab", m.n_vocab},
                    {"chat_format", m.chat_format}, {"attn", opts.policy.attn}}}};
}

// With an API key, every request but GET /health (and CORS preflights) carries it as a bearer token.
bool Server::Impl::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (opts.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + opts.api_key) return true;
  send_error(res, 401, "invalid or missing API key (send 'Authorization: Bearer <key>')");
  res.set_header("WWW-Authenticate", "Bearer");
  return false;
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_log = {Clock::now()};
    if (!opts.cors_origin.empty() && req.method == "OPTIONS") {  // a browser's preflight
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "86400");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!opts.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", opts.cors_origin);
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  }));
  http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != opts.model_name) return send_error(res, 404, "no model '" + std::string(req.matches[1]) + "' here");
    res.set_content(dump(model_object()), "application/json");
  }));
  http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(admission.active(), admission.waiting(), batch_members, batch_prefilling),
                    "text/plain; version=0.0.4");
  }));
  http.Get("/slots", guarded([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(slots_json()), "application/json");
  }));
  // llama-server's own: text to token ids and back, and the server's settings.
  post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const json body = json::parse(req.body);
      const json content = body.value("content", json());
      if (!content.is_string()) return send_error(res, 400, "'content' must be a string");
      const bool bos = body.value("add_special", false), special = body.value("parse_special", true);
      res.set_content(dump({{"tokens", engine.tokenize(content.get<std::string>(), bos, special)}}), "application/json");
    } catch (const json::exception& e) {
      send_error(res, 400, std::string("the request body is not the JSON expected: ") + e.what());
    }
  });
  post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::vector<int32_t> ids = json::parse(req.body).at("tokens").get<std::vector<int32_t>>();
      for (int32_t t : ids)
        if (t < 0 || t >= engine.info().n_vocab) return send_error(res, 400, "token id " + std::to_string(t) + " is outside the vocabulary");
      res.set_content(dump({{"content", engine.detokenize(ids)}}), "application/json");
    } catch (const json::exception& e) {
      send_error(res, 400, std::string("'tokens' must be a list of token ids: ") + e.what());
    }
  });
  if (opts.web_ui)  // the page itself asks for nothing secret; what it fetches needs the key where one is set
    http.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
  http.Get("/props", guarded([this](const httplib::Request&, httplib::Response& res) {
    json policies = json::array();
    for (const PolicyInfo& p : policy_registry()) policies.push_back(p.name);
    res.set_content(dump({{"total_slots", opts.parallel}, {"model_path", engine.info().path}, {"policies", policies},
                          {"default_generation_settings", {{"n_ctx", slot_ctx}, {"n_predict", opts.limits.max_tokens}}},
                          {"n_ctx", opts.n_ctx}, {"batch_size", opts.batch_tokens}, {"attn", opts.policy.attn},
                          {"chat_format", engine.info().chat_format}, {"build_info", "fasa " FASA_VERSION}}),
                    "application/json");
  }));
  post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, Endpoint::completions); });
  post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, Endpoint::chat); });
  for (const char* path : {"/completion", "/completions"})  // llama-server's own
    post(path, [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, Endpoint::llama_completion); });
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
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const RequestLog l = request_log;
    const int status = l.cancelled ? 499 : res.status;
    metrics.count_response(status);
    request_log = {};  // a response written without routing (a malformed request line) logs no stale figures
    if (!opts.log_requests) return;
    char tokens[96] = "", time[32] = "";
    if (l.prompt_tokens >= 0)
      std::snprintf(tokens, sizeof tokens, " prompt %lld (cached %lld) + %lld generated", (long long)l.prompt_tokens,
                    (long long)l.cached_tokens, (long long)l.generated_tokens);
    if (l.start != Clock::time_point{})
      std::snprintf(time, sizeof time, " %.0f ms", std::chrono::duration<double, std::milli>(Clock::now() - l.start).count());
    std::fprintf(stderr, "%s %s %s %d%s%s%s\n", req.remote_addr.c_str(), req.method.c_str(), req.path.c_str(), status,
                 l.cancelled ? " (cancelled)" : "", tokens, time);
  });
}

// A route that needs the API key (checked once the body is read: refusing earlier would leave the
// body on a kept-alive connection, read as the next request).
httplib::Server::Handler Server::Impl::guarded(httplib::Server::Handler handler) const {
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) handler(req, res);
  };
}

// A guarded POST route whose body is read here whatever its Content-Type: JSON sent as a form (curl's
// -d, urllib's default) would otherwise be cut at cpp-httplib's 8 KiB form limit with a 413;
// --max-body-bytes still bounds every body.
void Server::Impl::post(const char* path, httplib::Server::Handler handler) {
  http.Post(path, [this, handler = guarded(std::move(handler))](const httplib::Request& req, httplib::Response& res,
                                                                const httplib::ContentReader& read) {
    const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
    if (!req.has_header("Content-Length") && !chunked)  // as HTTP servers answer it
      return send_error(res, 411, "a POST needs a body with a Content-Length (or sent chunked)");
    // httplib refuses a stated length over its payload limit (--max-body-bytes) without reading it
    bool too_big = !chunked && std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > opts.max_body_bytes;
    httplib::Request whole = req;
    const bool read_all = !too_big && read([&](const char* data, size_t n) {
      too_big = whole.body.size() + n > opts.max_body_bytes;
      if (!too_big) whole.body.append(data, n);
      return !too_big;
    });
    if (too_big) return send_error(res, 413, "request body too large (over " + std::to_string(opts.max_body_bytes) +
                                                 " bytes; see --max-body-bytes)");
    if (!read_all) return send_error(res, 400, "the request body could not be read whole");
    handler(whole, res);
  });
  http.Get(path, [](const httplib::Request&, httplib::Response& res) {  // as OpenAI's API: a wrong method is a 405
    res.set_header("Allow", "POST");
    send_error(res, 405, "this endpoint takes POST");
  });
}

// Parses and checks a request, tokenizes its prompt and takes a slot; throws HttpError.
std::shared_ptr<Job> Server::Impl::accept(const httplib::Request& req, Endpoint endpoint) {
  auto job = std::make_shared<Job>();
  try {
    job->request = parse_completion_request(req.body, endpoint, opts.limits, opts.policy);
    engine.check_policy(job->request.policy);
  } catch (const BadRequest& e) {
    throw HttpError(400, e.what(), e.param);
  } catch (const std::exception& e) {  // fasa::Error for an unknown policy or bad budget
    throw HttpError(400, e.what());
  }
  CompletionRequest& r = job->request;
  if (r.chat) {
    job->prompt = engine.tokenize(engine.chat_prompt(r.messages), true, /*parse_special=*/true);
  } else if (!r.prompt_ids.empty()) {
    for (int32_t t : r.prompt_ids)
      if (t >= engine.info().n_vocab)
        throw HttpError(400, "'prompt' token id " + std::to_string(t) + " is outside the vocabulary", "prompt");
    job->prompt = r.prompt_ids;
  } else {
    job->prompt = engine.tokenize(r.prompt, true);
  }
  const int64_t n = (int64_t)job->prompt.size();
  const char* prompt_field = r.chat ? "messages" : "prompt";
  if (n == 0) throw HttpError(400, "the prompt is empty", prompt_field);
  if (n > opts.max_prompt_tokens)
    throw HttpError(400, "the prompt has " + std::to_string(n) + " tokens; this server takes at most " +
                             std::to_string(opts.max_prompt_tokens), prompt_field, "context_length_exceeded");
  // The reply ends with finish_reason "length" where the context runs out.
  r.gen.max_tokens = (int)std::min<int64_t>(r.gen.max_tokens, slot_ctx - n);

  // The free slot whose cache holds the longest start of this prompt under the same policy; among
  // equals, the one used least recently (its cache is the least likely to be wanted again).
  const int slot = admission.enter([&](int s) {
    const SlotState& st = slots[s];
    const int64_t shared = st.ctx && st.policy == r.policy ? common_prefix(st.ctx->tokens(), job->prompt) : 0;
    return std::min(shared, st.reusable) * (int64_t)1'000'000'000 - (int64_t)(st.last_used % 1'000'000'000);
  });
  if (slot < 0) throw HttpError(503, "the server is busy: all slots and the queue are taken; retry later");
  job->slot = std::make_shared<SlotLease>(admission, slot);
  slots[slot].last_used = next_use++;
  job->id = (r.chat ? "chatcmpl-" : "cmpl-") + id_prefix + "-" + std::to_string(next_id++);
  job->created = unix_now();
  job->peer = PeerSocket(req.local_port, req.remote_addr, req.remote_port);
  return job;
}

// The slot's context for the job, holding what it already held of the prompt's start; `to_feed` gets
// the rest (for the scheduler to prefill), or nothing when the prompt's log-probabilities are wanted
// (echo), which are fed here, token by token. A new context when the request's policy differs from the
// slot's or the prompt and reply outgrow it (contexts grow in powers of two up to the slot's share, so
// short requests do not allocate a whole slot's KV cache).
Context& Server::Impl::prepare(Job& job, std::vector<int32_t>& to_feed) {
  SlotState& slot = slots[job.slot->index];
  const CompletionRequest& r = job.request;
  const int64_t n = (int64_t)job.prompt.size(), need = n + r.gen.max_tokens;
  if (!slot.ctx || !(slot.policy == r.policy) || slot.ctx->n_ctx() < need) {
    slot.ctx.reset();
    ContextOptions co;
    co.policy = r.policy;
    co.n_ctx = std::min<int64_t>(slot_ctx, (int64_t)std::bit_ceil((uint64_t)std::max<int64_t>(need, 512)));
    co.threads = opts.threads;  // its own passes (an echo prompt's log-probabilities); the batch has its own
    slot.ctx = std::make_unique<Context>(engine, co);
    slot.policy = r.policy;
  }
  Context& ctx = *slot.ctx;
  const bool echo_logprobs = r.echo && r.gen.logprobs >= 0;  // every prompt token's logits are needed
  // Reused: the shared start, at most what was prefilled densely (a sparse policy's decoded tokens have
  // keys of a sparse pass), and never all of the prompt: its last token is evaluated again for its
  // logits, and truncate() evaluates the one before it again too, both prefilled as in a fresh context.
  int64_t keep = r.cache_prompt && !echo_logprobs && ctx.prefix_reuse_is_exact()
                     ? std::min(common_prefix(ctx.tokens(), job.prompt), slot.reusable) : 0;
  keep = std::max<int64_t>(0, std::min(keep, n - 1));
  int64_t cached = 0;  // positions kept in the cache (the last kept token is evaluated again; a sliding window may keep none)
  try {
    ctx.truncate(keep);
    cached = ctx.n_cached();
    to_feed.assign(job.prompt.begin() + keep, job.prompt.end());
    if (echo_logprobs) {
      const ContextStats before = ctx.stats();
      if (!r.echo_policy) ctx.feed_tokens(to_feed, &job.prompt_logprobs, r.gen.logprobs);
      else ctx.decode_tokens(to_feed, &job.prompt_logprobs, r.gen.logprobs);  // under the request's policy
      const ContextStats after = ctx.stats();
      job.prompt_seconds = after.prompt_seconds - before.prompt_seconds;
      job.prompt_kv_bytes = after.kv_bytes_read - before.kv_bytes_read;
      to_feed.clear();
    }
  } catch (...) {
    slot.ctx.reset();  // a context left half-fed is not reused
    throw;
  }
  slot.reusable = ctx.decode_is_dense() ? std::numeric_limits<int64_t>::max() : r.echo_policy ? 0 : n;
  job.cached_tokens = cached;
  request_log.prompt_tokens = n;
  request_log.cached_tokens = job.cached_tokens;
  return ctx;
}

void Server::Impl::show_slot(const Job& job, bool processing) {
  const Context* ctx = slots[job.slot->index].ctx.get();
  std::lock_guard lock(views_mu);
  SlotView& v = views[job.slot->index];
  v = {processing, ctx ? ctx->n_ctx() : 0, ctx ? ctx->n_past() : 0, (int64_t)job.prompt.size(), job.cached_tokens,
       job.request.policy.attn, job.id};
}

json Server::Impl::slots_json() {
  json out = json::array();
  std::lock_guard lock(views_mu);
  for (size_t i = 0; i < views.size(); ++i) {
    const SlotView& v = views[i];
    // n_ctx: what the slot may hold (as /props' default_generation_settings and llama-server say);
    // n_ctx_allocated: its cache now, grown as prompts need
    out.push_back({{"id", i}, {"is_processing", v.processing}, {"n_ctx", slot_ctx}, {"n_ctx_allocated", v.n_ctx},
                   {"n_past", v.n_past},
                   {"prompt_tokens", v.prompt_tokens}, {"cached_tokens", v.cached_tokens}, {"attn", v.attn},
                   {"id_task", v.id}});
  }
  return out;
}

namespace {
// A generation handed to the scheduler: its text pieces come back here, for the request's thread to
// send; the request's thread cancels it by setting `gone`.
struct Handoff {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::pair<std::string, std::vector<TokenLogprob>>> pieces;  // text, its tokens' logprobs
  std::vector<TokenLogprob> unsent;  // logprobs of tokens whose text is still held back
  bool done = false;
  GenerationResult result;
  std::exception_ptr error;
  std::atomic<bool> gone{false};
  std::optional<uint64_t> kv_read_at_first_token;  // the context's KV bytes read once its prompt was in
};
}  // namespace

GenerationResult Server::Impl::generate(Job& job, const PieceCallback& on_piece_sent) {
  if (stopping) throw HttpError(503, "the server is stopping");
  std::vector<int32_t> to_feed;
  Context& ctx = prepare(job, to_feed);
  const ContextStats before = ctx.stats();
  show_slot(job, true);
  struct ShownIdleAtExit {  // however this ends, /slots shows the slot free again
    Impl& s;
    const Job& job;
    ~ShownIdleAtExit() { s.show_slot(job, false); }
  } shown{*this, job};
  auto h = std::make_shared<Handoff>();
  auto add = [this, h, &ctx, &job, to_feed = std::move(to_feed)](Batch& batch) mutable {
    auto on_piece = [this, h, &job, &ctx](std::string_view piece) {  // on the scheduler thread
      if (!h->kv_read_at_first_token) h->kv_read_at_first_token = ctx.stats().kv_bytes_read;
      if (h->gone || stopping || job.peer.closed()) return false;
      // A reply sent whole needs only the result: waking its thread for every token cost 8 streams
      // about 5 % of each pass on 2 cores.
      if (!job.request.stream) return true;
      std::lock_guard lock(h->mu);
      h->pieces.emplace_back(piece, std::move(h->unsent));
      h->unsent.clear();
      h->ready.notify_one();
      return true;
    };
    GenerationOptions gen = job.request.gen;
    if (gen.logprobs >= 0 && job.request.stream)
      gen.on_logprob = [h](const TokenLogprob& t) {
        std::lock_guard lock(h->mu);
        h->unsent.push_back(t);
      };
    auto on_done = [h](GenerationResult r, std::exception_ptr error) {
      std::lock_guard lock(h->mu);
      h->result = std::move(r);
      h->error = error;
      h->done = true;
      h->ready.notify_one();
    };
    try {
      batch.add(ctx, std::move(to_feed), gen, on_piece, on_done);
    } catch (...) {
      on_done({}, std::current_exception());
    }
  };
  {
    std::lock_guard lock(sched_mu);
    if (stopping) throw HttpError(503, "the server is stopping");
    incoming.push_back(std::move(add));
  }
  sched_wake.notify_one();
  // Send the pieces as they come; a failed send (the client went away) cancels the generation. The
  // scheduler holds references to the job and the context until it is done, so this waits for that
  // even if sending throws.
  std::unique_lock lock(h->mu);
  try {
    for (;;) {
      h->ready.wait(lock, [&] { return h->done || !h->pieces.empty(); });
      while (!h->pieces.empty()) {
        const auto [piece, logprobs] = std::move(h->pieces.front());
        h->pieces.pop_front();
        lock.unlock();
        if (on_piece_sent && !h->gone && !on_piece_sent(piece, logprobs)) h->gone = true;
        lock.lock();
      }
      if (h->done) break;
    }
  } catch (...) {
    h->gone = true;
    if (!lock.owns_lock()) lock.lock();
    h->ready.wait(lock, [&] { return h->done; });
    throw;
  }
  if (h->error) {
    slots[job.slot->index].ctx.reset();
    std::rethrow_exception(h->error);
  }
  GenerationResult r = std::move(h->result);
  if (h->gone) r.finish_reason = FinishReason::Cancelled;
  const ContextStats after = ctx.stats();
  job.prompt_seconds += after.prompt_seconds - before.prompt_seconds;
  if (h->kv_read_at_first_token && r.n_tokens > 1)  // the first token came from the prompt's pass
    job.decode_kv_bytes_per_token = (double)(after.kv_bytes_read - *h->kv_read_at_first_token) / (r.n_tokens - 1);
  request_log.generated_tokens = r.n_tokens;
  request_log.cancelled = r.finish_reason == FinishReason::Cancelled;
  metrics.count_generation((int64_t)job.prompt.size() - job.cached_tokens, r.n_tokens, job.prompt_seconds,
                           after.decode_seconds - before.decode_seconds,
                           job.prompt_kv_bytes + after.kv_bytes_read - before.kv_bytes_read,
                           r.finish_reason == FinishReason::Cancelled);
  return r;
}

// One token in OpenAI's chat logprobs shape (token, logprob, bytes), or its text for completions.
json Server::Impl::token_json(const TokenLogprob& t, bool chat) const {
  const std::string text = engine.token_text(t.id);
  if (!chat) return text;
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(c);
  return {{"token", text}, {"logprob", t.logprob}, {"bytes", bytes}};
}

// OpenAI's `logprobs` of a choice or a stream chunk: chat {"content": [...]}, completions the legacy
// lists (the first token of a context has none) with byte offsets counted from `offset` on.
json Server::Impl::logprobs_json(bool chat, std::span<const TokenLogprob> logprobs, TextOffset& offset) const {
  if (chat) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      json entry = token_json(t, true);
      entry["top_logprobs"] = json::array();
      for (const auto& [id, lp] : t.top) entry["top_logprobs"].push_back(token_json({id, true, lp, {}}, true));
      content.push_back(entry);
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprob& t : logprobs) {
    const std::string text = engine.token_text(t.id);
    tokens.push_back(text);
    offsets.push_back(offset.at);
    const size_t unseen = std::min(offset.unseen, text.size());
    offset.unseen -= unseen;
    offset.at += text.size() - unseen;
    if (!t.known) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [id, lp] : t.top) alternatives.emplace(engine.token_text(id), lp);  // tokens of one text: the likeliest
    top.push_back(alternatives);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// Where the reply's text offsets start, as OpenAI's: after the prompt, or at 0 with echo (the prompt's
// tokens come first, their texts longer than the prompt's text by what detokenizing drops).
Server::Impl::TextOffset Server::Impl::first_offset(const Job& job) const {
  const size_t prompt_text = engine.detokenize(job.prompt).size();
  if (!job.request.echo) return {prompt_text, 0};
  size_t token_texts = 0;
  for (int32_t t : job.prompt) token_texts += engine.token_text(t).size();
  return {0, token_texts > prompt_text ? token_texts - prompt_text : 0};
}

json Server::Impl::completion_body(const Job& job, const GenerationResult& r) const {
  const CompletionRequest& q = job.request;
  json logprobs = nullptr;
  if (q.gen.logprobs >= 0) {
    std::vector<TokenLogprob> all = job.prompt_logprobs;  // empty without echo
    all.insert(all.end(), r.logprobs.begin(), r.logprobs.end());
    TextOffset offset = first_offset(job);
    logprobs = logprobs_json(q.chat, all, offset);
  }
  json choice = q.chat ? json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", r.text}}},
                              {"logprobs", logprobs}, {"finish_reason", name_of(r.finish_reason)}}
                       : json{{"index", 0}, {"text", q.echo ? engine.detokenize(job.prompt) + r.text : r.text},
                              {"logprobs", logprobs}, {"finish_reason", name_of(r.finish_reason)}};
  return {{"id", job.id},
          {"object", q.chat ? "chat.completion" : "text_completion"},
          {"created", job.created},
          {"model", opts.model_name},
          {"choices", json::array({choice})},
          {"usage", usage(job, r)},
          {"timings", timings(job, r)},
          {"attn", q.policy.attn}};
}

// llama-server's /completion reply (and its stream's last event): the text, its counts and why it
// stopped (eos, word: a stop string, or limit).
json Server::Impl::llama_body(const Job& job, const GenerationResult& r) const {
  std::string stop_type = r.finish_reason == FinishReason::Length ? "limit" : "eos";
  std::string all_text;  // the tokens' text: longer than the reply where a stop string cut it
  for (int32_t t : r.tokens) all_text += engine.token_text(t);
  if (r.finish_reason == FinishReason::Stop && all_text != r.text) stop_type = "word";
  return {{"content", r.text},
          {"id_slot", job.slot->index},
          {"stop", true},
          {"model", opts.model_name},
          {"tokens_predicted", r.n_tokens},
          {"tokens_evaluated", job.prompt.size()},
          {"tokens_cached", job.cached_tokens},
          {"truncated", false},
          {"stop_type", stop_type},
          {"timings", timings(job, r)}};
}

json Server::Impl::chunk(const Job& job, const json& choice) const {
  json c = {{"id", job.id},
            {"object", job.request.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", opts.model_name},
            {"choices", json::array({choice})}};
  if (job.request.include_usage) c["usage"] = nullptr;  // as OpenAI: null but in the usage chunk
  return c;
}

// Server-sent events: one chunk per piece of text (with its tokens' logprobs when asked), a last chunk
// with finish_reason, with stream_options.include_usage one more with the usage and no choices, then
// [DONE]; /completion's as llama-server's. False when the client went away.
bool Server::Impl::stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink) {
  const bool chat = job->request.chat, llama = job->request.endpoint == Endpoint::llama_completion;
  const bool with_logprobs = job->request.gen.logprobs >= 0;
  TextOffset offset = with_logprobs ? first_offset(*job) : TextOffset{};
  auto send = [&](const json& j) {
    const std::string event = "data: " + dump(j) + "\n\n";
    return sink.write(event.data(), event.size());
  };
  auto logprobs = [&](std::span<const TokenLogprob> tokens) {
    return with_logprobs ? logprobs_json(chat, tokens, offset) : json(nullptr);
  };
  auto piece_choice = [&](std::string_view text, std::span<const TokenLogprob> tokens) {
    return chat ? json{{"index", 0}, {"delta", {{"content", text}}}, {"logprobs", logprobs(tokens)}, {"finish_reason", nullptr}}
                : json{{"index", 0}, {"text", text}, {"logprobs", logprobs(tokens)}, {"finish_reason", nullptr}};
  };
  if (chat && !send(chunk(*job, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}})))
    return false;
  // With echo, the prompt goes first, with its logprobs (known once the prompt is prefilled).
  bool echo_pending = job->request.echo;
  auto send_echo = [&] {
    echo_pending = false;
    return send(chunk(*job, piece_choice(engine.detokenize(job->prompt), job->prompt_logprobs)));
  };
  GenerationResult r;
  size_t sent = 0;  // generated tokens whose logprobs went out
  try {
    r = generate(*job, [&](std::string_view piece, std::span<const TokenLogprob> tokens) {
      if (echo_pending && !send_echo()) return false;
      sent += tokens.size();
      if (llama) return send({{"content", piece}, {"stop", false}, {"id_slot", job->slot->index}});
      return send(chunk(*job, piece_choice(piece, tokens)));
    });
  } catch (const std::exception& e) {
    send(error_body(500, e.what()));
    sink.done();
    return true;
  }
  if (r.finish_reason == FinishReason::Cancelled || (echo_pending && !send_echo())) return false;
  if (llama) {  // llama-server's stream ends with the whole reply's counts, no [DONE]
    json end = llama_body(*job, r);
    end["content"] = "";
    if (!send(end)) return false;
    sink.done();
    return true;
  }
  // The last chunk: the logprobs of tokens whose text never went out (a stop string's).
  const std::span<const TokenLogprob> rest = std::span(r.logprobs).subspan(std::min(sent, r.logprobs.size()));
  json last = chat ? json{{"index", 0}, {"delta", json::object()}, {"logprobs", logprobs(rest)}, {"finish_reason", name_of(r.finish_reason)}}
                   : json{{"index", 0}, {"text", ""}, {"logprobs", logprobs(rest)}, {"finish_reason", name_of(r.finish_reason)}};
  json last_chunk = chunk(*job, last);
  last_chunk["timings"] = timings(*job, r);  // as llama-server's last chunk (the chat page shows them)
  if (!send(last_chunk)) return false;
  if (job->request.include_usage) {  // as OpenAI: one more chunk, with the usage and no choices
    json tail = chunk(*job, last);
    tail["choices"] = json::array();
    tail["usage"] = usage(*job, r);
    if (!send(tail)) return false;
  }
  const std::string done = "data: [DONE]\n\n";
  if (!sink.write(done.data(), done.size())) return false;
  sink.done();
  return true;
}

void Server::Impl::complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  std::shared_ptr<Job> job;
  try {
    job = accept(req, endpoint);
    if (!job->request.stream) {
      const GenerationResult r = generate(*job, {});
      if (r.finish_reason == FinishReason::Cancelled) {  // nobody is listening
        res.status = 499;                     // "client closed request", for the metrics
        return;
      }
      res.set_content(dump(endpoint == Endpoint::llama_completion ? llama_body(*job, r) : completion_body(*job, r)),
                      "application/json");
      return;
    }
  } catch (const HttpError& e) {
    return send_error(res, e.status, e.what(), e.param, e.code);
  } catch (const std::exception& e) {
    return send_error(res, 500, e.what());
  }
  res.set_chunked_content_provider("text/event-stream", [this, job](size_t, httplib::DataSink& sink) { return stream(job, sink); });
}

}  // namespace fasa
