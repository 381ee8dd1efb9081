#include "server/request.h"

#include <cmath>
#include <random>
#include <set>
#include <nlohmann/json.hpp>

namespace fasa {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& problem) {
  throw BadRequest("'" + field + "' " + problem, field);
}

// The field, or nullptr when absent or null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) bad(name, "must be an integer");
  // Non-negative integers parse as unsigned: compare them as such before reading them signed.
  const bool above = v->is_number_unsigned() ? v->get<uint64_t>() > (uint64_t)hi : v->get<int64_t>() > hi;
  if (above || v->get<int64_t>() < lo) bad(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v->get<int64_t>();
}

double get_number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, "must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  return x;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, "must be true or false");
  return v->get<bool>();
}

// OpenAI's `stop`: a string or up to 4 strings.
std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array() || v->size() > 4) bad("stop", "must be a string or an array of at most 4 strings");
  std::vector<std::string> out;
  for (const json& s : *v) {
    if (!s.is_string() || s.get_ref<const std::string&>().size() > 256) bad("stop", "entries must be strings of at most 256 bytes");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// A message's content: a string, or OpenAI's list of parts of which the text parts are joined.
std::string message_text(const json* content) {
  if (content && content->is_string()) return content->get<std::string>();
  if (!content || !content->is_array()) bad("messages[].content", "must be a string or a list of text parts");
  std::string text;
  for (const json& part : *content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.value("text", json()).is_string())
      bad("messages[].content", "parts must be {\"type\": \"text\", \"text\": ...}");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> get_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) bad("messages", "is required");
  if (!v->is_array() || v->empty()) bad("messages", "must be a non-empty array");
  std::vector<ChatMessage> out;
  for (const json& m : *v) {
    if (!m.is_object()) bad("messages", "entries must be objects with 'role' and 'content'");
    const json* role = field(m, "role");
    const json* content = field(m, "content");
    if (!role || !role->is_string()) bad("messages[].role", "must be a string");
    const std::string& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant")
      bad("messages[].role", "must be system, developer, user or assistant");
    out.push_back({r == "developer" ? "system" : r, message_text(content)});  // OpenAI's newer name for system
  }
  return out;
}

// OpenAI's `prompt`: a string or an array of token ids, alone or as the one element of an array (a
// batch of one, as lm-evaluation-harness sends). One prompt per request: a longer batch is refused.
void get_prompt(const json& body, CompletionRequest& r) {
  const json* v = field(body, "prompt");
  if (!v) bad("prompt", "is required");
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) v = &(*v)[0];
  if (v->is_string()) {
    r.prompt = v->get<std::string>();
  } else if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) {
    for (const json& t : *v) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad("prompt", "token ids must be non-negative integers");
      r.prompt_ids.push_back((int32_t)t.get<int64_t>());
    }
  } else {
    bad("prompt", "must be a string or an array of token ids, alone or in an array of one (one prompt per request)");
  }
}

// Fields this server reads, per endpoint; llama-server's extensions (top_k, ignore_eos, cache_prompt)
// and ours (the attention policy) included.
// The attention policy's settings a request may set (the profile stays the server's).
const std::vector<const char*> kPolicyFields = {"attn", "budget", "fcs", "fc_sharing", "fc_rank"};
const std::set<std::string> kCommonFields = [] {
  std::set<std::string> f = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
                             "stream_options", "n", "user", "ignore_eos", "cache_prompt", "logprobs"};
  f.insert(kPolicyFields.begin(), kPolicyFields.end());
  return f;
}();
const std::set<std::string> kChatFields = {"messages", "max_completion_tokens", "top_logprobs"};
const std::set<std::string> kCompletionFields = {"prompt", "echo", "echo_policy"};

// A field this server does not implement is an error, so a client never silently gets something other
// than it asked for, unless it holds OpenAI's value for "off" (clients and harnesses send those).
void check_fields(const json& body, bool chat) {
  for (const auto& [name, v] : body.items()) {
    if (kCommonFields.count(name) || (chat ? kChatFields : kCompletionFields).count(name)) continue;
    const double neutral_penalty = name == "repeat_penalty" ? 1.0 : 0.0;  // llama.cpp's multiplies, OpenAI's add
    const bool off = v.is_null() ||
                     (v.is_number() && v.get<double>() == neutral_penalty && name.find("penalty") != std::string::npos) ||
                     (name == "best_of" && v == 1) || (name == "logit_bias" && v.is_object() && v.empty()) ||
                     ((name == "tools" || name == "functions") && v.is_array() && v.empty()) ||
                     (name == "response_format" && v == json{{"type", "text"}}) || (name == "suffix" && v == "");
    if (!off) bad(name, "is not supported by this server");
  }
}

// llama-server's /completion body in OpenAI's terms: n_predict (-1: as many as allowed) is max_tokens,
// temperature defaults to llama-server's 0.8; its fields that mean "off" are dropped, others refused.
json openai_fields(json body, const RequestDefaults& limits) {
  if (field(body, "max_tokens")) bad("max_tokens", "is /v1/completions' field: /completion takes 'n_predict'");
  for (const char* openai_only : {"echo", "echo_policy", "logprobs", "n", "stream_options"})
    if (field(body, openai_only)) bad(openai_only, "is /v1/completions' field, not /completion's");
  const int64_t n = get_int(body, "n_predict", -1, -1, INT32_MAX);  // absent: -1, as llama-server
  body["max_tokens"] = n < 0 ? limits.max_tokens_limit : n;
  if (!field(body, "temperature")) body["temperature"] = 0.8;
  if (get_int(body, "n_probs", 0, 0, 1 << 20) > 0) bad("n_probs", "is not supported by this server (/v1/completions has logprobs)");
  if (get_int(body, "id_slot", -1, -1, 1 << 20) >= 0) bad("id_slot", "is not supported: the server picks the slot whose cache fits");
  for (const char* llama_only : {"n_predict", "n_probs", "id_slot"}) body.erase(llama_only);
  return body;
}

// The body as a JSON object; llama-server's /completion's in OpenAI's terms.
json parse_body(std::string_view text, Endpoint endpoint, const RequestDefaults& limits) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw BadRequest("the request body is not valid JSON");
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  if (endpoint == Endpoint::llama_completion) body = openai_fields(std::move(body), limits);
  return body;
}

// OpenAI's `stream_options`: only include_usage.
bool get_include_usage(const json& body) {
  const json* so = field(body, "stream_options");
  if (!so) return false;
  if (!so->is_object()) bad("stream_options", "must be an object");
  for (const auto& [key, value] : so->items()) {
    if (key != "include_usage") bad("stream_options." + key, "is not supported (only include_usage)");
    if (!value.is_boolean()) bad("stream_options.include_usage", "must be true or false");
  }
  return so->value("include_usage", false);
}

// Above the server's cap, max_tokens is clamped to it, as llama-server clamps n_predict.
int get_max_tokens(const json& body, const CompletionRequest& r, const RequestDefaults& limits) {
  const char* name = r.chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t lo = r.echo || r.endpoint == Endpoint::llama_completion ? 0 : 1;
  return (int)std::min<int64_t>(get_int(body, name, limits.max_tokens, lo, INT32_MAX), limits.max_tokens_limit);
}

// Completions: logprobs is the number of alternatives; chat: a flag, with top_logprobs alternatives.
int get_logprobs(const json& body, bool chat) {
  if (!chat) return (int)get_int(body, "logprobs", -1, 0, 20);
  if (get_bool(body, "logprobs", false)) return (int)get_int(body, "top_logprobs", 0, 0, 20);
  if (field(body, "top_logprobs")) bad("top_logprobs", "needs 'logprobs': true");
  return -1;
}

// echo_policy scores an echoed prompt; the server's default applies only to requests that echo one.
bool get_echo_policy(const json& body, const CompletionRequest& r, const RequestDefaults& limits) {
  const bool echo_scored = r.echo && r.gen.logprobs >= 0;
  const bool echo_policy = get_bool(body, "echo_policy", limits.echo_policy && echo_scored);
  if (echo_policy && !echo_scored) bad("echo_policy", "needs 'echo': true and 'logprobs'");
  return echo_policy;
}

// OpenAI's defaults: temperature 1, no top-p cut; top_k is an extension (0: off).
void get_sampling(const json& body, SamplerOptions& s) {
  s.temperature = (float)get_number(body, "temperature", 1.0, 0.0, 100.0);
  s.top_p = (float)get_number(body, "top_p", 1.0, 1e-6, 1.0);
  s.top_k = (int)get_int(body, "top_k", 0, 0, 1 << 30);
  // No seed (or -1, llama-server's "random"): a fresh one per request, so unseeded requests differ.
  const int64_t seed = get_int(body, "seed", -1, -1, INT64_MAX);
  s.seed = seed >= 0 ? (uint64_t)seed : std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
}

// The attention policy per request; the profile stays the server's.
PolicyOptions get_policy(const json& body, const PolicyOptions& defaults) {
  PolicyOptions policy = defaults;
  for (const char* name : kPolicyFields)
    if (const json* v = field(body, name)) {
      if (!v->is_string() && !v->is_number()) bad(name, "must be a string or a number");
      try {  // the settings' one parser, as the CLI's flags: the same message for the same mistake
        set_policy_option(policy, name, v->is_string() ? v->get<std::string>() : v->dump());
      } catch (const Error& e) {
        throw BadRequest(e.what());
      }
    }
  return policy;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view text, Endpoint endpoint, const RequestDefaults& limits,
                                           const PolicyOptions& defaults) {
  const json body = parse_body(text, endpoint, limits);
  const bool chat = endpoint == Endpoint::chat;
  check_fields(body, chat);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.chat = chat;
  if (chat) r.messages = get_messages(body);
  else get_prompt(body, r);
  if (get_int(body, "n", 1, 1, 1) != 1) bad("n", "must be 1");
  r.stream = get_bool(body, "stream", false);
  r.include_usage = get_include_usage(body);
  r.echo = !chat && get_bool(body, "echo", false);
  r.cache_prompt = get_bool(body, "cache_prompt", true);
  r.gen.max_tokens = get_max_tokens(body, r, limits);
  r.gen.logprobs = get_logprobs(body, chat);
  r.echo_policy = get_echo_policy(body, r, limits);
  get_sampling(body, r.gen.sampling);
  r.gen.ignore_eos = get_bool(body, "ignore_eos", false);
  r.gen.stop = get_stop(body);
  r.policy = get_policy(body, defaults);
  return r;
}

}  // namespace fasa
