// fasa serve's insides, shared by its rooms: server.cpp (the server's life, and the scheduler that steps
// every generating slot in one batch), routes.cpp (the HTTP routes, API key, request log), slots.cpp
// (a request into a job on a slot, each slot's prompt cache), responses.cpp (OpenAI's and
// llama-server's bodies, server-sent events). Not installed: only src/server/ includes it.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/admission.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/server.h"
#include "server/sockets.h"

namespace fasa {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Generated text may hold bytes that are not UTF-8; they are replaced rather than failing the reply.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// OpenAI's error shape: message, type, and the request field at fault (`param`) and a machine-readable
// `code` (e.g. "context_length_exceeded"), each null where there is none.
inline json error_body(int status, const std::string& message, const std::string& param = "", const std::string& code = "") {
  const char* type = status == 503 ? "unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error";
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
}

inline void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
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

// What the request log line says about the request this thread serves (handler, stream and logger of
// one request run on one thread).
struct RequestLog {
  Clock::time_point start;
  int64_t prompt_tokens = -1, cached_tokens = 0, generated_tokens = 0;
  bool cancelled = false;  // the generation was cancelled (the client went away): logged as nginx's 499, not the 200 sent
};
extern thread_local RequestLog request_log;  // (routes.cpp)

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
  std::string policy_ran;                    // what attended, and why (Context::policy_summary at the end)
};

std::string random_hex(int n);  // a random hex string, so response ids differ across restarts of the server
int64_t unix_now();

// A generation handed to the scheduler, and its text on the way back (server.cpp).
struct Handoff;
// Gets each piece of text with the log-probabilities of the tokens it completes; false: stop.
using PieceCallback = std::function<bool(std::string_view text, std::span<const TokenLogprob> logprobs)>;

struct Server::Impl {
  Impl(const Engine& e, ServerOptions o) : engine(e), opts(std::move(o)), slots(opts.parallel, opts.queue) {}

  // Set up by the constructors, read-only after: every owner below reads them without a lock.
  const Engine& engine;
  ServerOptions opts;
  int64_t slot_ctx = 0;  // tokens per slot

  // The slots, handed out by the admission gate: a slot's state is touched only by the request holding it.
  struct Slots {
    Slots(int parallel, int queue) : admission(parallel, queue), state(parallel), views(parallel) {}
    Admission admission;
    std::vector<SlotState> state;  // [parallel]
    std::atomic<uint64_t> next_use{1};
    std::mutex views_mu;
    std::vector<SlotView> views;  // [parallel], under views_mu: GET /slots reads them too
  } slots;

  // The scheduler: one thread steps a Batch of every generating slot, so all advance in each forward pass;
  // request threads hand their work over (incoming) and wait for its text (Handoff).
  struct Scheduler {
    std::mutex mu;
    std::condition_variable wake;
    std::vector<std::function<void(Batch&)>> incoming;  // run on the scheduler thread before its next pass
    std::atomic<bool> stopping{false};  // read by the generations' callbacks on the scheduler thread
    std::atomic<int> batch_members{0};
    std::atomic<int64_t> batch_prefilling{0};
    std::thread thread;
  } scheduler;

  // The HTTP side (the listener's threads): its routes, and what replies carry (ids) and count (/metrics).
  struct Http {
    ServerMetrics metrics;
    httplib::Server listener;
    std::vector<std::pair<std::regex, std::string>> route_methods;  // each route's path pattern and method
    const std::string id_prefix = random_hex(8);
    const int64_t started = unix_now();
    std::atomic<uint64_t> next_id{1};
  } http;

  // server.cpp: the scheduler's loop, and a job handed to it.
  void schedule();
  GenerationResult generate(Job& job, const PieceCallback& on_piece_sent);
  void hand_over(std::function<void(Batch&)> add);
  GenerationResult finish_generation(Job& job, Context& ctx, Handoff& h, const ContextStats& before);

  // routes.cpp
  void routes();
  httplib::Server::HandlerResponse preflight(const httplib::Request& req, httplib::Response& res) const;
  void tokenize(const httplib::Request& req, httplib::Response& res) const;
  void detokenize(const httplib::Request& req, httplib::Response& res) const;
  json tokenizer_info() const;
  json props() const;
  httplib::Server::HandlerResponse http_error(const httplib::Request& req, httplib::Response& res) const;
  void log_request(const httplib::Request& req, const httplib::Response& res);
  json model_object() const;
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  httplib::Server::Handler guarded(httplib::Server::Handler handler) const;
  void get(const char* path, httplib::Server::Handler handler);
  void post(const char* path, httplib::Server::Handler handler);
  std::string methods_of(const std::string& path) const;  // "GET", "POST": a known path's; "" for none
  void complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);

  // slots.cpp
  std::shared_ptr<Job> accept(const httplib::Request& req, Endpoint endpoint);
  Context& prepare(Job& job, std::vector<int32_t>& to_feed);
  void show_slot(const Job& job, bool processing);
  json slots_json();

  // responses.cpp
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
  struct EventStream;  // one stream's server-sent events
  bool stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink);
};

}  // namespace fasa
