// `fasa serve` on a loopback port: both endpoints with and without streaming, per-request policies,
// concurrent clients, the bounded queue (503), cancellation on disconnect, and malformed requests.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "calib/auto_profile.h"
#include "model/session.h"
#include "sparse/policy.h"
#include "server/server.h"

namespace fasa {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kPrompt = "Ge1:1 In the beginning God created the heaven and the earth.";

ServerOptions on_free_loopback_port(ServerOptions o) {
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

// A server on a free loopback port, serving on its own thread until destroyed.
class TestServer {
 public:
  TestServer(const Engine& engine, const ServerOptions& o) : server_(engine, on_free_loopback_port(o)) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.run(); });
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port() const { return port_; }

 private:
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

json post_json(const TestServer& s, const std::string& path, const json& body, int want_status = 200) {
  auto res = s.client().Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << "no response";
  if (!res) return {};
  EXPECT_EQ(res->status, want_status) << res->body;
  return json::parse(res->body, nullptr, false);
}

// Text of every SSE `data:` event but [DONE]; `done` tells whether [DONE] came last.
std::vector<json> sse_events(const std::string& body, bool& done) {
  std::vector<json> out;
  done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    out.push_back(json::parse(data));
  }
  return out;
}

// Greedy reply from the API: what `fasa run` prints for the same prompt.
std::string api_greedy(const Engine& e, const std::string& prompt, int n, const PolicyOptions& policy = {}) {
  ContextOptions co;
  co.policy = policy;
  Context ctx(e, co);
  ctx.feed(prompt);
  GenerationOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0;
  return ctx.generate(g).text;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new Engine(FASA_BUNDLED_MODEL); }
  static void TearDownTestSuite() { delete engine_; }
  static ServerOptions options(int parallel = 2, int queue = 16) {
    ServerOptions o;
    o.parallel = parallel;
    o.queue = queue;
    o.threads = 2;
    o.policy.synthetic_profile = true;  // lets requests pick `attn: fasa` without a calibrated profile
    return o;
  }
  static Engine* engine_;
};
Engine* ServerTest::engine_ = nullptr;

TEST_F(ServerTest, HealthModelsAndMetrics) {
  TestServer s(*engine_, options());
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = s.client().Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["meta"]["arch"], "llama");
  post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}});
  auto metrics = s.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("fasa_requests_total{code=\"200\"}"), std::string::npos);
  EXPECT_NE(metrics->body.find("fasa_generated_tokens_total 4"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("fasa_kv_bytes_read_total"), std::string::npos);
  const size_t at = metrics->body.find("\nfasa_resident_bytes ");  // the process holds at least the weights
  ASSERT_NE(at, std::string::npos) << metrics->body;
  EXPECT_GE(std::stod(metrics->body.substr(at + 21)), (double)engine_->info().weight_bytes);
}

TEST_F(ServerTest, CompletionAtTemperatureZeroEqualsTheApi) {
  TestServer s(*engine_, options());
  const json r = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], api_greedy(*engine_, kPrompt, 24));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
  EXPECT_EQ(r["usage"]["prompt_tokens"], (int)engine_->tokenize(kPrompt, true).size());
  // The same prompt as token ids.
  const json ids = post_json(s, "/v1/completions",
                             {{"prompt", engine_->tokenize(kPrompt, true)}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(ids["choices"][0]["text"], r["choices"][0]["text"]);
  // ... and as a batch of one (lm-evaluation-harness's form); a batch of two is refused.
  const json batch = post_json(s, "/v1/completions",
                               {{"prompt", json::array({engine_->tokenize(kPrompt, true)})}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(batch["choices"][0]["text"], r["choices"][0]["text"]);
  post_json(s, "/v1/completions", {{"prompt", json::array({json::array({1, 2}), json::array({1, 2})})}, {"max_tokens", 1}}, 400);
}

TEST_F(ServerTest, StreamingSendsTheSameTextAsOneReply) {
  TestServer s(*engine_, options());
  const json body = {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0}};
  const json whole = post_json(s, "/v1/completions", body);
  json sbody = body;
  sbody["stream"] = true;
  auto res = s.client().Post("/v1/completions", sbody.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  const std::vector<json> events = sse_events(res->body, done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  for (const json& e : events) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(events.back().contains("usage"));  // not asked for
  // stream_options.include_usage: as OpenAI, one more chunk with the usage and no choices; the others
  // carry "usage": null.
  sbody["stream_options"] = {{"include_usage", true}};
  res = s.client().Post("/v1/completions", sbody.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::vector<json> with_usage = sse_events(res->body, done);
  ASSERT_EQ(with_usage.size(), events.size() + 1) << res->body;
  EXPECT_EQ(with_usage.back()["choices"], json::array());
  EXPECT_EQ(with_usage.back()["usage"]["completion_tokens"], 16);
  EXPECT_EQ(with_usage.back()["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"]);
  EXPECT_TRUE(with_usage.front()["usage"].is_null());
  EXPECT_EQ(with_usage[with_usage.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerTest, ChatCompletionsPlainAndStreamed) {
  TestServer s(*engine_, options());
  const json messages = json::array({{{"role", "system"}, {"content", "Answer from the scripture."}},
                                     {{"role", "user"}, {"content", "Who created the heaven?"}}});
  const json body = {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}};
  const json r = post_json(s, "/v1/chat/completions", body);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  const std::string prompt = engine_->chat_prompt({{"system", "Answer from the scripture."}, {"user", "Who created the heaven?"}});
  EXPECT_EQ(r["choices"][0]["message"]["content"], api_greedy(*engine_, prompt, 12));
  // The same conversation with content given as a list of text parts.
  json parts = body;
  parts["messages"][1]["content"] = json::array({{{"type", "text"}, {"text", "Who created "}}, {{"type", "text"}, {"text", "the heaven?"}}});
  EXPECT_EQ(post_json(s, "/v1/chat/completions", parts)["choices"][0]["message"], r["choices"][0]["message"]);

  json sbody = body;
  sbody["stream"] = true;
  auto res = s.client().Post("/v1/chat/completions", sbody.dump(), "application/json");
  ASSERT_TRUE(res);
  bool done = false;
  const std::vector<json> events = sse_events(res->body, done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.front()["object"], "chat.completion.chunk");
  std::string text;
  for (const json& e : events)
    if (e["choices"][0]["delta"].contains("content")) text += e["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, r["choices"][0]["message"]["content"]);
}

TEST_F(ServerTest, PolicyPerRequest) {
  TestServer s(*engine_, options());
  const json base = {{"prompt", kPrompt}, {"max_tokens", 16}, {"temperature", 0}};
  const std::string full = post_json(s, "/v1/completions", base)["choices"][0]["text"];
  // FASA whose budget covers the context is dense attention.
  json wide = base;
  wide["attn"] = "fasa";
  wide["budget"] = 100000;
  wide["fcs"] = 4;
  const json r = post_json(s, "/v1/completions", wide);
  EXPECT_EQ(r["attn"], "fasa");
  EXPECT_EQ(r["choices"][0]["text"], full);
  // A small budget runs the sparse path and equals the API's FASA run with the same options.
  json narrow = wide;
  narrow["budget"] = 8;
  PolicyOptions p = options().policy;
  p.attn = "fasa";
  p.budget = Budget::count(8);
  p.fcs = 4;
  EXPECT_EQ(post_json(s, "/v1/completions", narrow)["choices"][0]["text"], api_greedy(*engine_, kPrompt, 16, p));
}

// `attn: fasa` on a server started without a profile: the slot's first long prompt measures the
// automatic profile (cached on disk, in the tests' private cache dir), and the reply is the API's with it.
TEST_F(ServerTest, FasaWithoutAProfileMeasuresOneOnTheFirstLongPrompt) {
  if (engine_->auto_profiles().find())
    GTEST_SKIP() << "the engine kept an automatic profile of this model earlier";
  const std::string cached = engine_->auto_profiles().path();
  ServerOptions o = options();
  o.policy.synthetic_profile = false;
  TestServer s(*engine_, o);
  std::string prompt = kPrompt;
  while ((int64_t)engine_->tokenize(prompt, true).size() < PromptProfiler::kMinTokens + 50) prompt.append(" ").append(kPrompt);
  const json r = post_json(s, "/v1/completions",
                           {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"attn", "fasa"}, {"budget", 64}});
  EXPECT_TRUE(std::filesystem::exists(cached)) << cached;
  PolicyOptions p = o.policy;
  p.attn = "fasa";
  p.budget = Budget::count(64);
  EXPECT_EQ(r["choices"][0]["text"], api_greedy(*engine_, prompt, 8, p));
}

TEST_F(ServerTest, ConcurrentClientsAllGetTheirReplies) {
  TestServer s(*engine_, options(2, 16));
  const std::string want = api_greedy(*engine_, kPrompt, 12);
  std::vector<std::future<int>> clients;
  for (int c = 0; c < 8; ++c)
    clients.push_back(std::async(std::launch::async, [&, c] {
      int ok = 0;
      for (int i = 0; i < 3; ++i) {
        json body = {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}, {"stream", (c + i) % 2 == 0}};
        auto res = s.client().Post("/v1/completions", body.dump(), "application/json");
        if (!res || res->status != 200) continue;
        std::string text;
        if (body["stream"]) {
          bool done;
          for (const json& e : sse_events(res->body, done)) text += e["choices"][0]["text"].get<std::string>();
        } else {
          text = json::parse(res->body)["choices"][0]["text"];
        }
        ok += text == want;
      }
      return ok;
    }));
  for (auto& c : clients) EXPECT_EQ(c.get(), 3);
}

// A streaming request that generates until told to stop; `started` is set at its first event.
std::thread long_stream(const TestServer& s, std::promise<void>& started, std::atomic<bool>& hang_up) {
  return std::thread([&s, &started, &hang_up] {
    httplib::Client c = s.client();
    const json body = {{"prompt", kPrompt}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true}};
    bool first = true;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (first) started.set_value();
      first = false;
      return !hang_up.load();
    };
    c.send(req);
  });
}

double metric_value(const TestServer& s, const std::string& name) {
  auto res = s.client().Get("/metrics");
  if (!res) return -1;
  const size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + name.size() + 2));
}

// `request` sent as raw bytes to 127.0.0.1:port (what an HTTP client library would not send); the reply
// read until the server closes the connection.
std::string raw_exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (fd >= 0 && ::connect(fd, (const sockaddr*)&addr, sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), 0) == (ssize_t)request.size()) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, (size_t)n);
  }
  if (fd >= 0) ::close(fd);
  return reply;
}

bool wait_for_metric(const TestServer& s, const std::string& name, double value) {
  for (int i = 0; i < 200; ++i) {
    if (metric_value(s, name) == value) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST_F(ServerTest, FullQueueIsTurnedAwayAndHangingUpCancels) {
  ServerOptions o = options(1, 0);
  o.n_ctx = 1000;
  o.limits.max_tokens_limit = 1000;
  TestServer s(*engine_, o);
  std::promise<void> started;
  std::atomic<bool> hang_up{false};
  std::thread streamer = long_stream(s, started, hang_up);
  ASSERT_EQ(started.get_future().wait_for(30s), std::future_status::ready);
  // The only slot is busy and nothing may wait: 503 with a JSON error.
  const json busy = post_json(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, 503);
  EXPECT_EQ(busy["error"]["type"], "unavailable_error");
  // The streaming client hangs up: its generation stops and the slot frees.
  hang_up = true;
  streamer.join();
  EXPECT_TRUE(wait_for_metric(s, "fasa_requests_cancelled_total", 1));
  EXPECT_TRUE(wait_for_metric(s, "fasa_requests_active", 0));
  post_json(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});

  // A non-streaming client that gives up (read timeout) cancels too.
  httplib::Client impatient("127.0.0.1", s.port());
  impatient.set_read_timeout(0, 200000);
  const json body = {{"prompt", kPrompt}, {"max_tokens", 900}, {"ignore_eos", true}};
  auto res = impatient.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_FALSE(res);
  impatient.stop();
  EXPECT_TRUE(wait_for_metric(s, "fasa_requests_cancelled_total", 2));
  EXPECT_LT(metric_value(s, "fasa_generated_tokens_total"), 2 * 900);
  // Both are counted and logged as nginx's 499 (the client went away), not as the 200 their headers sent.
  EXPECT_TRUE(wait_for_metric(s, "fasa_requests_total{code=\"499\"}", 2));
}

// Continuous batching: two streams advance in the same forward passes (the batch gauge and GET /slots
// show both), and a third request's prompt is fed while they stream.
TEST_F(ServerTest, SlotsAndMetricsShowTheBatch) {
  ServerOptions o = options(3, 0);
  o.n_ctx = 3000;
  o.limits.max_tokens_limit = 1000;
  o.batch_tokens = 8;  // the third prompt goes in chunks between the streams' tokens
  TestServer s(*engine_, o);
  std::promise<void> started[2];
  std::atomic<bool> hang_up{false};
  std::thread streams[2] = {long_stream(s, started[0], hang_up), long_stream(s, started[1], hang_up)};
  for (auto& st : started) ASSERT_EQ(st.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(wait_for_metric(s, "fasa_batch_size", 2));
  auto slots = s.client().Get("/slots");
  ASSERT_TRUE(slots);
  const json view = json::parse(slots->body);
  ASSERT_EQ(view.size(), 3u);
  int processing = 0;
  for (const json& slot : view) processing += slot["is_processing"].get<bool>();
  EXPECT_EQ(processing, 2);
  // A third request joins the running batch and gets the reply it would get alone.
  const json r = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 6}, {"temperature", 0}});
  EXPECT_EQ(r["choices"][0]["text"], api_greedy(*engine_, kPrompt, 6));
  hang_up = true;
  for (auto& t : streams) t.join();
  EXPECT_TRUE(wait_for_metric(s, "fasa_batch_size", 0));
  EXPECT_TRUE(wait_for_metric(s, "fasa_requests_active", 0));
  slots = s.client().Get("/slots");
  ASSERT_TRUE(slots);
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  const json per_slot = json::parse(props->body)["default_generation_settings"]["n_ctx"];
  for (const json& slot : json::parse(slots->body)) {
    EXPECT_FALSE(slot["is_processing"].get<bool>());
    EXPECT_GT(slot["n_past"].get<int64_t>(), 0);  // each keeps its prompt cache
    EXPECT_EQ(slot["n_ctx"], per_slot);            // what /props says a slot holds
    EXPECT_LE(slot["n_ctx_allocated"].get<int64_t>(), per_slot.get<int64_t>());
  }
}

// llama-server's habits: /tokenize, /detokenize and /props; a JSON body sent as a form; unseeded (or
// seed -1) sampling differs from request to request while a seed repeats; max_tokens above the cap is
// clamped to it, and to the room the context has.
TEST_F(ServerTest, LlamaServerEndpointsSeedsAndTheMaxTokensCap) {
  ServerOptions o = options();
  o.limits.max_tokens_limit = 5;
  TestServer s(*engine_, o);
  const json ids = post_json(s, "/tokenize", {{"content", kPrompt}});
  EXPECT_EQ(ids["tokens"].get<std::vector<int32_t>>(), engine_->tokenize(kPrompt, false));
  EXPECT_EQ(post_json(s, "/tokenize", {{"content", kPrompt}, {"add_special", true}})["tokens"].get<std::vector<int32_t>>(),
            engine_->tokenize(kPrompt, true));
  EXPECT_EQ(post_json(s, "/detokenize", {{"tokens", ids["tokens"]}})["content"], kPrompt);
  post_json(s, "/detokenize", {{"tokens", {1 << 30}}}, 400);
  post_json(s, "/tokenize", {{"text", "x"}}, 400);
  // vLLM's fields, which lm-evaluation-harness's remote tokenizer sends, and its /tokenizer_info.
  const json vllm = post_json(s, "/tokenize", {{"prompt", kPrompt}, {"add_special_tokens", false}});
  EXPECT_EQ(vllm["tokens"], ids["tokens"]);
  EXPECT_EQ(vllm["count"], ids["tokens"].size());
  EXPECT_EQ(post_json(s, "/tokenize", {{"prompt", kPrompt}})["tokens"].get<std::vector<int32_t>>(), engine_->tokenize(kPrompt, true));
  EXPECT_EQ(post_json(s, "/detokenize", {{"tokens", ids["tokens"]}})["prompt"], kPrompt);
  auto info = s.client().Get("/tokenizer_info");
  ASSERT_TRUE(info);
  const json tok = json::parse(info->body);
  EXPECT_EQ(post_json(s, "/tokenize", {{"prompt", tok["eos_token"]}, {"add_special_tokens", false}})["tokens"],
            json::array({engine_->model().tokenizer.eos()}));
  EXPECT_EQ(post_json(s, "/tokenize", {{"prompt", tok["bos_token"]}, {"add_special_tokens", false}})["tokens"],
            json::array({engine_->model().tokenizer.bos()}));
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["total_slots"], 2);

  // JSON sent without its Content-Type (curl -d: a form) is read as JSON, past cpp-httplib's 8 KiB form limit.
  std::string big = json{{"prompt", kPrompt}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  big.insert(big.size() - 1, 20000, ' ');  // JSON whitespace: a 20 KB body
  auto form = s.client().Post("/v1/completions", big, "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  ASSERT_EQ(form->status, 200) << form->body;
  EXPECT_EQ(json::parse(form->body)["choices"][0]["text"], api_greedy(*engine_, kPrompt, 4));

  const json capped = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 50}, {"ignore_eos", true}});
  EXPECT_EQ(capped["usage"]["completion_tokens"], 5);
  auto sample = [&](const json& seed) {
    json body = {{"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 1.5}, {"ignore_eos", true}};
    if (!seed.is_null()) body["seed"] = seed;
    return post_json(s, "/v1/completions", body)["choices"][0]["text"].get<std::string>();
  };
  EXPECT_EQ(sample(7), sample(7));
  std::set<std::string> unseeded, random;
  for (int i = 0; i < 4; ++i) unseeded.insert(sample(nullptr)), random.insert(sample(-1));
  EXPECT_GT(unseeded.size(), 1u);
  EXPECT_GT(random.size(), 1u);

  // max_tokens beyond what the context has room for: the reply stops where the context ends, "length".
  ServerOptions small = options(1);
  small.n_ctx = 48;
  TestServer tight(*engine_, small);
  const json full = post_json(tight, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4000}, {"ignore_eos", true}});
  EXPECT_EQ(full["usage"]["completion_tokens"].get<int64_t>(), 48 - (int64_t)engine_->tokenize(kPrompt, true).size());
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
}

// llama-server's /completion: n_predict, its reply's fields, a stream of {"content", "stop"} events.
TEST_F(ServerTest, LlamaServerCompletionEndpoint) {
  TestServer s(*engine_, options());
  const json r = post_json(s, "/completion", {{"prompt", kPrompt}, {"n_predict", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r["content"], api_greedy(*engine_, kPrompt, 6));
  EXPECT_EQ(r["tokens_predicted"], 6);
  EXPECT_EQ(r["tokens_evaluated"], engine_->tokenize(kPrompt, true).size());
  EXPECT_EQ(r["stop_type"], "limit");
  EXPECT_TRUE(r["stop"].get<bool>());
  // A stop string inside the greedy reply: cut there, stop_type "word".
  const std::string text = r["content"];
  const std::string stop = text.substr(text.size() / 2, 2);
  const json cut = post_json(s, "/completion", {{"prompt", kPrompt}, {"n_predict", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {stop}}});
  EXPECT_EQ(cut["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["stop_type"], "word");

  auto res = s.client().Post("/completion", json{{"prompt", kPrompt}, {"n_predict", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}}.dump(),
                             "application/json");
  ASSERT_TRUE(res);
  bool done = false;
  const std::vector<json> events = sse_events(res->body, done);
  EXPECT_FALSE(done);  // llama-server's stream has no [DONE]
  ASSERT_GE(events.size(), 2u);
  std::string streamed;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_FALSE(events[i]["stop"].get<bool>());
    streamed += events[i]["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  EXPECT_TRUE(events.back()["stop"].get<bool>());
  EXPECT_EQ(events.back()["tokens_predicted"], 6);

  post_json(s, "/completion", {{"prompt", kPrompt}, {"max_tokens", 4}}, 400);  // OpenAI's name: refused with n_predict named
  post_json(s, "/completion", {{"prompt", kPrompt}, {"n_probs", 3}}, 400);
  post_json(s, "/completion", {{"prompt", kPrompt}, {"n_predict", -2}}, 400);
}

// cpp-httplib's default SO_REUSEPORT let a second server share a busy port and take half its requests.
TEST_F(ServerTest, ASecondServerOnABusyPortIsRefused) {
  TestServer first(*engine_, options());
  ServerOptions o = options();
  o.host = "127.0.0.1";
  o.port = first.port();
  Server second(*engine_, o);
  EXPECT_THROW(
      {
        try {
          second.bind();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(":" + std::to_string(first.port()) + ": cannot listen"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(first.client().Get("/health")->status, 200);
}

TEST_F(ServerTest, MalformedRequestsGetJsonErrorsAndTheServerKeepsServing) {
  ServerOptions o = options();
  o.max_prompt_tokens = 32;
  o.max_body_bytes = 4096;
  TestServer s(*engine_, o);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/v1/completions", "{bad json"},
      {"/v1/completions", "[1,2,3]"},
      {"/v1/completions", "{}"},
      {"/v1/completions", R"({"prompt": 5})"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})"},
      {"/v1/completions", R"({"prompt": [1, -2]})"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -1})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e12})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 99999999999999999999})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})"},
      {"/v1/completions", R"({"prompt": "x", "temperature": "hot"})"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})"},
      {"/v1/completions", R"({"prompt": "x", "n": 2})"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})"},
      {"/v1/completions", R"({"prompt": "x", "stop": ["a","b","c","d","e"]})"},
      {"/v1/completions", R"({"prompt": "x", "stop": 7})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "nope"})"},
      {"/v1/completions", R"({"prompt": "x", "attn": 3})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "fasa", "budget": -3})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "fasa", "budget": "lots"})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "fasa", "fcs": 0})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "fasa", "fc_sharing": "diagonal"})"},
      {"/v1/completions", R"({"prompt": "x", "attn": "fasa", "fc_rank": "loudest"})"},
      {"/v1/completions", R"({"prompt": ")" + std::string(300, 'a') + " b" + std::string(300, 'c') + R"("})"},
      {"/v1/chat/completions", R"({"prompt": "x"})"},
      {"/v1/chat/completions", R"({"messages": []})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 42}]})"},
      {"/v1/chat/completions", R"({"messages": ["hello"]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"},
      // OpenAI fields the server does not honour are refused, not ignored
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"},
      {"/v1/completions", R"({"prompt": "x", "frequency_penalty": 0.5})"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"5": 100}})"},
      {"/v1/completions", R"({"prompt": "x", "no_such_field": 1})"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 99})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"},
  };
  for (const auto& [path, body] : bad) {
    auto res = s.client().Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body << " -> " << res->body;
    const json err = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(err.contains("error") && err["error"]["message"].is_string()) << res->body;
    // OpenAI's shape: every key present, param a string or null, code a string or null
    for (const char* key : {"type", "param", "code"}) EXPECT_TRUE(err["error"].contains(key)) << key << ": " << res->body;
  }
  // The field at fault is the error's param, as OpenAI names it.
  const json field = post_json(s, "/v1/completions", {{"prompt", "x"}, {"temperature", -1}}, 400);
  EXPECT_EQ(field["error"]["param"], "temperature") << field.dump();
  EXPECT_TRUE(field["error"]["code"].is_null()) << field.dump();
  std::string long_prompt;  // over max_prompt_tokens (32)
  for (int i = 0; i < 20; ++i) long_prompt += "In the beginning ";
  const json too_long = post_json(s, "/v1/completions", {{"prompt", long_prompt}, {"max_tokens", 2}}, 400);
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded") << too_long.dump();
  EXPECT_EQ(too_long["error"]["param"], "prompt") << too_long.dump();
  // A POST route asked with GET: 405 with the method it takes.
  auto get = s.client().Get("/v1/chat/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(get->body)["error"]["type"], "invalid_request_error");
  // And any other method on any known path, at once: POST on a GET route, PUT and DELETE; an unknown path stays 404.
  for (const auto& [method, path, allow] : {std::tuple{"POST", "/v1/models", "GET"}, {"PUT", "/v1/completions", "POST"},
                                            {"DELETE", "/v1/models/x", "GET"}, {"PATCH", "/health", "GET"}}) {
    const std::string reply = raw_exchange(s.port(), std::string(method) + " " + path +
                                                         " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    EXPECT_EQ(reply.rfind("HTTP/1.1 405", 0), 0u) << method << " " << path << ": " << reply;
    EXPECT_NE(reply.find(std::string("Allow: ") + allow + "\r\n"), std::string::npos) << reply;
  }
  EXPECT_EQ(s.client().Post("/v1/nothing", "{}", "application/json")->status, 404);
  // A setting's mistake gets the message of the settings' one parser, the CLI's (tests/CMakeLists.txt: cli.bad_budget).
  const json err = post_json(s, "/v1/completions", {{"prompt", "x"}, {"attn", "fasa"}, {"budget", 2.5}}, 400);
  EXPECT_EQ(err["error"]["message"],
            "budget: a share of the context must be at most 1 (100%); a token count has no decimal point, got '2.5'");
  auto big = s.client().Post("/v1/completions", std::string(8192, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  // A POST without a body: no Content-Length is 411, an empty one 400 (not 413: nothing is too large).
  for (const auto& [request, status] : {std::pair{"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 411},
                                        std::pair{"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                                  "Connection: close\r\n\r\n", 400}}) {
    const std::string reply = raw_exchange(s.port(), request);
    EXPECT_EQ(reply.rfind("HTTP/1.1 " + std::to_string(status), 0), 0u) << reply;
    EXPECT_NE(reply.find("\"invalid_request_error\""), std::string::npos) << reply;
  }
  auto missing = s.client().Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
  post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}});
  // The values that mean "off" are what clients send by default: accepted.
  post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}, {"frequency_penalty", 0}, {"presence_penalty", 0},
                                   {"logit_bias", json::object()}, {"best_of", 1}, {"user", "u1"}});
}

// The chat page: served at / (the page the Chromium test drives, python/tests/test_chat_page.py), with what it reads:
// /props' policies, and each stream's last chunk's timings (speed, KV bytes per decode step, fewer
// for FASA at a small budget than for full attention). --no-webui: no page.
TEST_F(ServerTest, ChatPageAndWhatItReads) {
  TestServer s(*engine_, options());
  auto page = s.client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
  auto props = s.client().Get("/props");
  ASSERT_TRUE(props);
  const json policies = json::parse(props->body)["policies"];
  EXPECT_EQ(policies.size(), policy_registry().size());
  EXPECT_EQ(policies[0], "full");
  EXPECT_EQ(json::parse(props->body)["dense_policies"], json::array({"full"})) << "the page sends no budget to them";
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += kPrompt;
  auto kv_per_token = [&](const json& policy) {
    json body = {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"max_tokens", 8}, {"ignore_eos", true}, {"stream", true}};
    body.update(policy);
    auto res = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200);
    bool done = false;
    const std::vector<json> events = res ? sse_events(res->body, done) : std::vector<json>{};
    EXPECT_TRUE(done);
    EXPECT_FALSE(events.empty());
    if (events.empty()) return 0.0;
    const json& timings = events.back()["timings"];
    EXPECT_EQ(timings["predicted_n"], 8) << events.back().dump();
    EXPECT_GT(timings["predicted_per_second"].get<double>(), 0.0);
    return timings["kv_bytes_per_token"].get<double>();
  };
  const double full = kv_per_token({{"attn", "full"}}), fasa = kv_per_token({{"attn", "fasa"}, {"budget", 8}});
  EXPECT_GT(full, 0.0);
  EXPECT_LT(fasa, full);

  ServerOptions without = options();
  without.web_ui = false;
  TestServer bare(*engine_, without);
  auto none = bare.client().Get("/");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
}

TEST_F(ServerTest, ApiKeyGuardsEverythingButHealthAndCorsAnswersPreflights) {
  ServerOptions o = options();
  o.api_key = "s3cret";
  o.cors_origin = "https://example.org";
  TestServer s(*engine_, o);
  auto health = s.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->get_header_value("Access-Control-Allow-Origin"), "https://example.org");
  for (const auto& auth : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
    auto models = s.client().Get("/v1/models", auth);
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
    EXPECT_TRUE(json::parse(models->body)["error"]["message"].is_string());
    auto post = s.client().Post("/v1/completions", auth, json{{"prompt", kPrompt}}.dump(), "application/json");
    ASSERT_TRUE(post);
    EXPECT_EQ(post->status, 401);
  }
  const httplib::Headers good = {{"Authorization", "Bearer s3cret"}};
  auto models = s.client().Get("/v1/models", good);
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  auto post = s.client().Post("/v1/completions", good, json{{"prompt", kPrompt}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200) << post->body;
  auto preflight = s.client().Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
}

TEST_F(ServerTest, ModelsByIdAndResponseIdsDifferAcrossServers) {
  ServerOptions o = options();
  o.model_name = "kjv-recall";
  std::string first_id;
  for (int run = 0; run < 2; ++run) {
    TestServer s(*engine_, o);
    auto m = s.client().Get("/v1/models/kjv-recall");
    ASSERT_TRUE(m);
    ASSERT_EQ(m->status, 200);
    const json model = json::parse(m->body);
    EXPECT_EQ(model["id"], "kjv-recall");
    EXPECT_GT(model["created"].get<int64_t>(), 1700000000);
    auto none = s.client().Get("/v1/models/other");
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 404);
    const json r = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 1}});
    if (run == 0) first_id = r["id"];
    else EXPECT_NE(r["id"], first_id);
  }
}

// Log-probabilities: the API's distribution at each position; with echo, the prompt's tokens first.
TEST_F(ServerTest, CompletionLogprobsAndEchoMatchTheModel) {
  TestServer s(*engine_, options());
  const json r = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 3}, {"temperature", 0},
                                                  {"logprobs", 2}, {"echo", true}});
  const std::vector<int32_t> prompt = engine_->tokenize(kPrompt, true);
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + 3) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // nothing predicts the first token
  // The prompt's token logprobs against a context fed the first token, then the rest (16 tokens: the
  // small-batch matmul, which rounds differently from the server's one pass of 17).
  Context ctx(*engine_, {});
  ctx.feed_tokens({prompt[0]});
  std::vector<TokenLogprob> each;
  ctx.feed_tokens({prompt.begin() + 1, prompt.end()}, &each, 2);
  for (size_t i = 1; i < prompt.size(); ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), each[i - 1].logprob, 1e-3) << i;
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
  }
  // Greedy: each generated token is the most likely one, so its logprob is the top alternative's.
  for (size_t i = prompt.size(); i < prompt.size() + 3; ++i) {
    double best = -1e30;
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), best, 1e-6);
  }
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>().rfind(engine_->detokenize(prompt), 0), 0u);
  // Each token's text_offset is where its text stands in the reply's text (the echoed prompt's first
  // word without the SentencePiece space the text drops), up to the text's end.
  const std::string text = r["choices"][0]["text"];
  size_t end = 0;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    std::string token = lp["tokens"][i];
    const size_t at = lp["text_offset"][i];
    if (at == 0 && !token.empty() && token[0] == ' ' && text.rfind(token, 0) != 0) token.erase(0, 1);
    EXPECT_EQ(text.substr(at, token.size()), token) << i << ": " << lp.dump();
    end = at + token.size();
  }
  EXPECT_EQ(end, text.size());
  // lm-evaluation-harness scores a continuation with echo and max_tokens 0.
  const json score = post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 0}, {"logprobs", 0}, {"echo", true}});
  EXPECT_EQ(score["choices"][0]["logprobs"]["tokens"].size(), prompt.size());
  EXPECT_EQ(score["usage"]["completion_tokens"], 0);
}

// Streamed, each chunk carries the logprobs of the tokens whose text it brings (with echo the prompt's
// come first, a stop string's in the last chunk): together, the lists of the reply sent whole.
TEST_F(ServerTest, StreamedLogprobsAddUpToTheWholeReplys) {
  TestServer s(*engine_, options());
  auto streamed = [&](const char* path, json body) {
    body["stream"] = true;
    auto res = s.client().Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200);
    bool done = false;
    return res ? sse_events(res->body, done) : std::vector<json>{};
  };
  // A stop string from the middle of the greedy reply: its tokens' logprobs go in the last chunk.
  const std::string greedy = api_greedy(*engine_, kPrompt, 12);
  const json body = {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true},
                     {"logprobs", 2}, {"echo", true}, {"stop", greedy.substr(greedy.size() / 2, 3)}};
  const json whole_reply = post_json(s, "/v1/completions", body)["choices"][0];
  ASSERT_EQ(whole_reply["finish_reason"], "stop");
  const json& whole = whole_reply["logprobs"];
  json joined = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (const json& e : streamed("/v1/completions", body)) {
    const json& lp = e["choices"][0]["logprobs"];
    ASSERT_TRUE(lp.is_object()) << e.dump();
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : lp[key]) joined[key].push_back(v);
  }
  EXPECT_EQ(joined, whole);
  EXPECT_GT(whole["tokens"].size(), engine_->tokenize(kPrompt, true).size());

  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0},
                     {"logprobs", true}, {"top_logprobs", 2}};
  const json chat_whole = post_json(s, "/v1/chat/completions", chat)["choices"][0]["logprobs"]["content"];
  json chat_joined = json::array();
  for (const json& e : streamed("/v1/chat/completions", chat))
    if (e["choices"][0].contains("logprobs") && !e["choices"][0]["logprobs"].is_null())
      for (const json& t : e["choices"][0]["logprobs"]["content"]) chat_joined.push_back(t);
  EXPECT_EQ(chat_joined, chat_whole);
  EXPECT_FALSE(chat_whole.empty());
}

// `echo_policy`: the prompt's logprobs from decode steps under the request's policy (StreamingLLM with
// 6 rows here), equal to a bare session's decode steps; the dense prefill's differ once the prompt
// outgrows the budget.
TEST_F(ServerTest, EchoScoredUnderTheRequestsPolicy) {
  TestServer s(*engine_, options());
  const json body = {{"prompt", kPrompt}, {"max_tokens", 0}, {"logprobs", 0}, {"echo", true}, {"attn", "stream"}, {"budget", 6}};
  json scored = body;
  scored["echo_policy"] = true;
  const json policy_lp = post_json(s, "/v1/completions", scored)["choices"][0]["logprobs"]["token_logprobs"];
  const json dense_lp = post_json(s, "/v1/completions", body)["choices"][0]["logprobs"]["token_logprobs"];
  PolicyOptions p = options().policy;
  p.attn = "stream";
  p.budget = Budget::count(6);
  const std::vector<int32_t> prompt = engine_->tokenize(kPrompt, true);
  ASSERT_EQ(policy_lp.size(), prompt.size());
  Session ref(engine_->model(), session_options(p, (int64_t)prompt.size()), make_policy(p, engine_->model(), nullptr));
  double largest_gap = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i > 0) {  // nothing predicts the first token
      const std::span<const float> l = ref.logits();
      double sum = 0;
      for (float x : l) sum += std::exp((double)x - l[0]);
      const double logprob = (double)l[prompt[i]] - l[0] - std::log(sum);
      EXPECT_NEAR(policy_lp[i].get<double>(), logprob, 1e-4) << i;
      largest_gap = std::max(largest_gap, std::abs(policy_lp[i].get<double>() - dense_lp[i].get<double>()));
    }
    ref.decode(prompt[i]);
  }
  EXPECT_GT(largest_gap, 1e-2);  // the policy changed the scores
  post_json(s, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 1}, {"echo_policy", true}}, 400);

  // fasa serve --echo-policy: the same without the field (a harness cannot send it), the dense
  // prefill's where a request says "echo_policy": false; a request that echoes nothing is unaffected.
  ServerOptions o = options();
  o.limits.echo_policy = true;
  TestServer harness(*engine_, o);
  EXPECT_EQ(post_json(harness, "/v1/completions", body)["choices"][0]["logprobs"]["token_logprobs"], policy_lp);
  json dense = body;
  dense["echo_policy"] = false;
  EXPECT_EQ(post_json(harness, "/v1/completions", dense)["choices"][0]["logprobs"]["token_logprobs"], dense_lp);
  post_json(harness, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 1}}, 200);
}

TEST_F(ServerTest, ChatLogprobsAndTheDeveloperRole) {
  TestServer s(*engine_, options());
  const json r = post_json(s, "/v1/chat/completions",
                           {{"messages", {{{"role", "developer"}, {"content", "Answer briefly."}}, {{"role", "user"}, {"content", "Hi"}}}},
                            {"max_tokens", 4}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}});
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), r["usage"]["completion_tokens"].get<size_t>());
  ASSERT_FALSE(content.empty());
  std::string text;
  for (const json& t : content) {
    EXPECT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_EQ(t["logprob"], t["top_logprobs"][0]["logprob"]);  // greedy took the most likely token
    text += t["token"].get<std::string>();
  }
  EXPECT_EQ(text, r["choices"][0]["message"]["content"]);
}

// A slot keeps its context: a second request that starts with the first one's prompt prefills only
// the rest, and replies exactly what a fresh context replies, for every policy whose state is the cache.
TEST_F(ServerTest, PromptCacheReusesAPrefixAndRepliesAsAFreshContext) {
  TestServer s(*engine_, options(/*parallel=*/1));
  const std::string doc = std::string(kPrompt) + " Ge1:2 And the earth was without form, and void; and darkness was upon the face of the deep.";
  for (const char* attn : {"full", "fasa", "quest", "stream", "h2o"}) {
    const bool reused = std::string(attn) != "h2o";  // H2O's votes of forgotten queries would stay
    PolicyOptions p = options().policy;
    p.attn = attn;
    p.budget = Budget::count(8);  // (= "8" trips GCC 12's -Wrestrict false positive here)
    const json body = {{"max_tokens", 8}, {"temperature", 0}, {"attn", attn}, {"budget", 8}};
    json first = body, second = body;
    first["prompt"] = doc;
    second["prompt"] = doc + " Ge1:3 And God said,";
    const json a = post_json(s, "/v1/completions", first);  // the last policy's cache taken over (not by H2O)
    if (reused && std::string(attn) != "full") EXPECT_GT(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << attn;
    else EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << attn;
    const json b = post_json(s, "/v1/completions", second);
    const int64_t n_first = (int64_t)engine_->tokenize(doc, true).size();
    if (reused) EXPECT_GE(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), n_first - 2) << attn;
    else EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << attn;
    EXPECT_EQ(b["timings"]["cache_n"], b["usage"]["prompt_tokens_details"]["cached_tokens"]);
    EXPECT_EQ(b["choices"][0]["text"], api_greedy(*engine_, second["prompt"], 8, p)) << attn;
    // cache_prompt false: nothing reused, the same reply
    json again = second;
    again["cache_prompt"] = false;
    const json c = post_json(s, "/v1/completions", again);
    EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(c["choices"][0]["text"], b["choices"][0]["text"]);
    // The next turn: the prompt and reply so far, then more. Only a prompt's densely prefilled tokens
    // are reused under a sparse policy (its decoded tokens' keys came from a sparse pass).
    json third = body;
    third["prompt"] = second["prompt"].get<std::string>() + c["choices"][0]["text"].get<std::string>() + " Ge1:4";
    const json d = post_json(s, "/v1/completions", third);
    const int64_t n_second = (int64_t)engine_->tokenize(second["prompt"].get<std::string>(), true).size();
    const int64_t cached = d["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (std::string(attn) == "full") {
      EXPECT_GT(cached, n_second);
    } else if (reused) {
      EXPECT_LE(cached, n_second) << attn;
    }
    EXPECT_EQ(d["choices"][0]["text"], api_greedy(*engine_, third["prompt"], 8, p)) << attn;
  }
}

// Only the policy changes (the chat page's menu): the slot's context goes on under the new one from
// the cached prompt, where that policy's state is the cache's rows alone, and replies as a fresh context
// with it; H2O and SnapKV, which vote with the queries they saw, start afresh.
TEST_F(ServerTest, PromptCacheGoesOnUnderAnotherPolicyWhereItsStateIsTheCache) {
  TestServer s(*engine_, options(/*parallel=*/1));
  std::string prompt = std::string(kPrompt) + " Ge1:2 And the earth was without form, and void;";
  const char* more[] = {" and darkness", " was upon", " the face", " of the deep.", " Ge1:3 And God"};
  const char* attns[] = {"full", "fasa", "snapkv", "stream", "quest"};
  for (size_t i = 0; i < std::size(attns); ++i) {
    const std::string attn = attns[i];
    const int64_t n_before = (int64_t)engine_->tokenize(prompt, true).size();
    prompt += more[i];
    const json r = post_json(s, "/v1/completions",
                             {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"attn", attn}, {"budget", 8}});
    const int64_t cached = r["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (attn == "full" || attn == "snapkv") EXPECT_EQ(cached, 0) << attn;  // the first request; a voter
    else EXPECT_GE(cached, n_before - 2) << attn;
    PolicyOptions p = options().policy;
    p.attn = attn;
    p.budget = Budget::count(8);
    EXPECT_EQ(r["choices"][0]["text"], api_greedy(*engine_, prompt, 6, p)) << attn;
  }
}

}  // namespace
}  // namespace fasa
