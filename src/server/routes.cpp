// fasa serve's HTTP side: the routes, the API key, CORS, the request log, the chat page.
#include "server/server_impl.h"

#include <cstdio>
#include <cstdlib>

#include "server/chat_page.h"
#include "sparse/policy.h"

namespace fasa {

thread_local RequestLog request_log;

json Server::Impl::model_object() const {
  const ModelInfo& m = engine.info();
  return {{"id", opts.model_name}, {"object", "model"}, {"created", http.started}, {"owned_by", "fasa"},
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
  http.listener.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return preflight(req, res); });
  http.listener.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!opts.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", opts.cors_origin);
  });
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  get("/health", [](Req, Res res) { res.set_content(R"({"status":"ok"})", "application/json"); });
  get("/v1/models", guarded([this](Req, Res res) {
    res.set_content(dump({{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  }));
  get(R"(/v1/models/(.+))", guarded([this](Req req, Res res) {
    if (req.matches[1] != opts.model_name) return send_error(res, 404, "no model '" + std::string(req.matches[1]) + "' here");
    res.set_content(dump(model_object()), "application/json");
  }));
  get("/metrics", guarded([this](Req, Res res) {
    res.set_content(http.metrics.render(slots.admission.active(), slots.admission.waiting(), scheduler.batch_members,
                                        scheduler.batch_prefilling),
                    "text/plain; version=0.0.4");
  }));
  get("/slots", guarded([this](Req, Res res) { res.set_content(dump(slots_json()), "application/json"); }));
  post("/tokenize", [this](Req req, Res res) { tokenize(req, res); });
  post("/detokenize", [this](Req req, Res res) { detokenize(req, res); });
  get("/tokenizer_info", guarded([this](Req, Res res) { res.set_content(dump(tokenizer_info()), "application/json"); }));
  if (opts.web_ui)  // the page itself asks for nothing secret; what it fetches needs the key where one is set
    get("/", [](Req, Res res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
  get("/props", guarded([this](Req, Res res) { res.set_content(dump(props()), "application/json"); }));
  post("/v1/completions", [this](Req req, Res res) { complete(req, res, Endpoint::completions); });
  post("/v1/chat/completions", [this](Req req, Res res) { complete(req, res, Endpoint::chat); });
  for (const char* path : {"/completion", "/completions"})  // llama-server's own
    post(path, [this](Req req, Res res) { complete(req, res, Endpoint::llama_completion); });
  http.listener.set_error_handler(
      httplib::Server::HandlerWithResponse([this](Req req, Res res) { return http_error(req, res); }));
  http.listener.set_exception_handler([](Req, Res res, std::exception_ptr) { send_error(res, 500, "internal error"); });
  http.listener.set_logger([this](Req req, const httplib::Response& res) { log_request(req, res); });
}

// A browser's CORS preflight, answered before routing.
httplib::Server::HandlerResponse Server::Impl::preflight(const httplib::Request& req, httplib::Response& res) const {
  request_log = {Clock::now()};
  if (opts.cors_origin.empty() || req.method != "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  res.set_header("Access-Control-Max-Age", "86400");
  return httplib::Server::HandlerResponse::Handled;
}

// Text to token ids and back, in llama-server's fields ("content", "add_special") and vLLM's ("prompt",
// "add_special_tokens"; lm-evaluation-harness's remote tokenizer), and the server's settings.
void Server::Impl::tokenize(const httplib::Request& req, httplib::Response& res) const {
  try {
    const json body = json::parse(req.body);
    const bool vllm = body.contains("prompt");
    const json text = body.value(vllm ? "prompt" : "content", json());
    if (!text.is_string()) return send_error(res, 400, "'content' (or 'prompt') must be a string");
    const bool bos = vllm ? body.value("add_special_tokens", true) : body.value("add_special", false);
    const std::vector<int32_t> ids = engine.tokenize(text.get<std::string>(), bos, body.value("parse_special", true));
    json reply = {{"tokens", ids}};
    if (vllm) reply.update({{"count", ids.size()}, {"max_model_len", slot_ctx}});
    res.set_content(dump(reply), "application/json");
  } catch (const json::exception& e) {
    send_error(res, 400, std::string("the request body is not the JSON expected: ") + e.what());
  }
}

void Server::Impl::detokenize(const httplib::Request& req, httplib::Response& res) const {
  try {
    const std::vector<int32_t> ids = json::parse(req.body).at("tokens").get<std::vector<int32_t>>();
    for (int32_t t : ids)
      if (t < 0 || t >= engine.info().n_vocab) return send_error(res, 400, "token id " + std::to_string(t) + " is outside the vocabulary");
    const std::string text = engine.detokenize(ids);
    res.set_content(dump({{"content", text}, {"prompt", text}}), "application/json");
  } catch (const json::exception& e) {
    send_error(res, 400, std::string("'tokens' must be a list of token ids: ") + e.what());
  }
}

json Server::Impl::tokenizer_info() const {  // vLLM's
  const ModelInfo& m = engine.info();
  const auto text_of = [](const std::string& piece) { return piece.empty() ? json() : json(piece); };
  return {{"tokenizer_class", "fasa"}, {"bos_token", text_of(m.bos_token)}, {"eos_token", text_of(m.eos_token)},
          {"pad_token", json()}, {"add_bos_token", m.add_bos}, {"model_max_length", slot_ctx}};
}

json Server::Impl::props() const {  // llama-server's
  json policies = json::array(), dense = json::array();  // dense: those that take no budget
  for (const PolicyInfo& p : policy_registry()) {
    policies.push_back(p.name);
    if (p.dense) dense.push_back(p.name);
  }
  return {{"total_slots", opts.parallel}, {"model_path", engine.info().path}, {"policies", policies},
          {"dense_policies", dense},
          {"default_generation_settings", {{"n_ctx", slot_ctx}, {"n_predict", opts.limits.max_tokens}}},
          {"n_ctx", opts.n_ctx}, {"batch_size", opts.batch_tokens}, {"attn", opts.policy.attn},
          {"chat_format", engine.info().chat_format}, {"build_info", "fasa " FASA_VERSION}};
}

// Unknown paths, oversized bodies and the like: the same JSON error shape as our own errors. A known
// path asked with another method (POST /v1/models, PUT /v1/completions) is a 405 naming the one it takes,
// as OpenAI's API answers.
httplib::Server::HandlerResponse Server::Impl::http_error(const httplib::Request& req, httplib::Response& res) const {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  if (const std::string allow = methods_of(req.path); res.status == 404 && !allow.empty()) {
    res.set_header("Allow", allow);
    send_error(res, 405, "this endpoint takes " + allow);
    return httplib::Server::HandlerResponse::Handled;
  }
  send_error(res, res.status, res.status == 404   ? "no such endpoint"
                              : res.status == 413 ? "request body too large"
                                                  : "request failed (HTTP " + std::to_string(res.status) + ")");
  return httplib::Server::HandlerResponse::Handled;
}

void Server::Impl::log_request(const httplib::Request& req, const httplib::Response& res) {
  const RequestLog l = request_log;
  const int status = l.cancelled ? 499 : res.status;
  http.metrics.count_response(status);
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
  http.listener.Post(path, [this, handler = guarded(std::move(handler))](
                               const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
    const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
    if (!req.has_header("Content-Length") && !chunked)  // as HTTP servers answer it
      return send_error(res, 411, "a POST needs a body with a Content-Length (or sent chunked)");
    // A stated length over its payload limit (--max-body-bytes) httplib reads past without handing it
    // over, so the body is still read (skipped): left on a kept-alive connection it would be parsed as
    // the next request.
    bool too_big = !chunked && std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > opts.max_body_bytes;
    httplib::Request whole = req;
    const bool read_all = read([&](const char* data, size_t n) {
      too_big = too_big || whole.body.size() + n > opts.max_body_bytes;
      if (!too_big) whole.body.append(data, n);
      return !too_big;
    });
    if (too_big) return send_error(res, 413, "request body too large (over " + std::to_string(opts.max_body_bytes) +
                                                 " bytes; see --max-body-bytes)");
    if (!read_all) return send_error(res, 400, "the request body could not be read whole");
    handler(whole, res);
  });
  http.route_methods.emplace_back(std::regex(path), "POST");
}

void Server::Impl::get(const char* path, httplib::Server::Handler handler) {
  http.listener.Get(path, std::move(handler));
  http.route_methods.emplace_back(std::regex(path), "GET");
}

std::string Server::Impl::methods_of(const std::string& path) const {
  std::string allow;
  for (const auto& [pattern, method] : http.route_methods)
    if (std::regex_match(path, pattern)) allow += (allow.empty() ? "" : ", ") + method;
  return allow;
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
