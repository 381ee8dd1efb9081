// Load client for `fasa serve` (run it through tools/load-test.sh): C clients each send R requests
// to a loopback server, one in four streamed (--stream 0: none), and every reply is checked (JSON with
// a choice, or an event stream ending in [DONE]). Prints requests/s, generated tokens/s (the replies'
// usage: the server's aggregate decode rate as clients see it), latency percentiles and failures.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kPrompts[] = {
    "Ge1:1 In the beginning God created the heaven and the earth.",
    "Ps23:1 The LORD is my shepherd; I shall not want.",
    "Joh1:1 In the beginning was the Word,",
    "Ex20:3 Thou shalt have no other gods before me.",
};

struct Outcome {
  double seconds;
  std::string failure;  // empty: a good reply
  int64_t tokens = 0;   // completion tokens (usage)
};

struct Load {
  int max_tokens = 32;
  bool stream_some = true;  // one request in four streamed
  bool ignore_eos = false;  // every reply max_tokens long
};

// completion_tokens of a reply's `usage` (absent or null: 0).
int64_t completion_tokens(const json& reply) {
  return reply.is_object() && reply.contains("usage") && reply["usage"].is_object()
             ? reply["usage"].value("completion_tokens", (int64_t)0) : 0;
}

// A stream's usage chunk (stream_options.include_usage): the last event before [DONE].
json last_event(const std::string& stream) {
  const size_t done = stream.rfind("data: [DONE]");
  const size_t at = done == std::string::npos || done == 0 ? std::string::npos : stream.rfind("data: {", done - 1);
  if (at == std::string::npos) return nullptr;
  return json::parse(stream.substr(at + 6, stream.find('\n', at) - at - 6), nullptr, false);
}

Outcome one_request(httplib::Client& c, int i, const Load& load, bool chat) {
  const bool stream = load.stream_some && i % 4 == 3;
  json body = {{"max_tokens", load.max_tokens}, {"temperature", 0.7}, {"seed", i}, {"stream", stream},
               {"ignore_eos", load.ignore_eos}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  const std::string prompt = kPrompts[i % 4];
  if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  else body["prompt"] = prompt;
  const auto t0 = Clock::now();
  auto res = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(), "application/json");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res) return {s, "no response (" + httplib::to_string(res.error()) + ")"};
  if (res->status != 200) return {s, "HTTP " + std::to_string(res->status)};
  if (stream)
    return {s, res->body.ends_with("data: [DONE]\n\n") ? "" : "stream without [DONE]", completion_tokens(last_event(res->body))};
  const json j = json::parse(res->body, nullptr, false);
  return {s, j.is_object() && j.contains("choices") ? "" : "reply without choices", completion_tokens(j)};
}

}  // namespace

int main(int argc, char** argv) {
  int port = 8097, clients = 32, requests = 20;
  Load load;
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string k = argv[a];
    const int v = std::atoi(argv[a + 1]);
    if (k == "--port") port = v;
    else if (k == "--clients") clients = v;
    else if (k == "--requests") requests = v;
    else if (k == "--max-tokens") load.max_tokens = v;
    else if (k == "--stream") load.stream_some = v != 0;
    else if (k == "--ignore-eos") load.ignore_eos = v != 0;
    else {
      std::fprintf(stderr, "usage: %s [--port P] [--clients C] [--requests R] [--max-tokens N] [--stream 0|1] "
                   "[--ignore-eos 0|1]\n", argv[0]);
      return 2;
    }
  }
  std::mutex mu;
  std::vector<double> latencies;
  std::map<std::string, int> failures;
  int64_t tokens = 0;
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);  // loopback only
      client.set_read_timeout(300, 0);
      for (int r = 0; r < requests; ++r) {
        const Outcome o = one_request(client, c * requests + r, load, (c + r) % 2 == 1);
        std::lock_guard lock(mu);
        latencies.push_back(o.seconds);
        tokens += o.tokens;
        if (!o.failure.empty()) ++failures[o.failure];
      }
    });
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) { return latencies[std::min(latencies.size() - 1, (size_t)(p * latencies.size()))]; };
  int failed = 0;
  for (const auto& [_, n] : failures) failed += n;
  std::printf("requests: %zu (%d clients x %d), failed: %d, wall %.1f s, %.2f requests/s, %lld tokens generated: %.2f tokens/s\n",
              latencies.size(), clients, requests, failed, wall, latencies.size() / wall, (long long)tokens, tokens / wall);
  std::printf("latency: p50 %.3f s, p90 %.3f s, p99 %.3f s, max %.3f s\n", pct(0.50), pct(0.90), pct(0.99),
              latencies.back());
  for (const auto& [what, n] : failures) std::printf("failure: %s x%d\n", what.c_str(), n);
  return failed == 0 ? 0 : 1;
}
