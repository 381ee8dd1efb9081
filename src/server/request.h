#pragma once
// Request bodies of /v1/completions, /v1/chat/completions and llama-server's /completion parsed and
// checked into what a generation needs. Anything malformed, mistyped or out of range is a BadRequest (HTTP 400) that
// names the field.
#include <stdexcept>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "fasa/fasa.h"

namespace fasa {

class BadRequest : public std::runtime_error {
 public:
  explicit BadRequest(const std::string& message, std::string param = "")
      : std::runtime_error(message), param(std::move(param)) {}
  std::string param;  // the request field at fault (OpenAI's error "param"), or empty
};

// What a request gets where it says nothing, and the most it may ask for.
struct RequestDefaults {
  int max_tokens = 256;         // default when a request gives none
  int max_tokens_limit = 4096;  // largest max_tokens a request may ask for
  bool echo_policy = false;     // echo_policy's default (fasa serve --echo-policy: for harnesses that cannot send it)
};

// Which API a request came in by: it decides the reply's shape.
enum class Endpoint { completions, chat, llama_completion };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  bool chat = false;                  // endpoint == chat
  std::string prompt;                 // completions: the prompt text
  std::vector<int32_t> prompt_ids;    // completions: a prompt given as token ids
  std::vector<ChatMessage> messages;  // chat
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage: a last chunk with the usage and no choices
  bool echo = false;                  // completions: the prompt goes before the reply (with its logprobs)
  bool echo_policy = false;           // echo's logprobs from decode steps under `policy`, not the dense prefill
  bool cache_prompt = true;           // reuse a slot's cached prefix of this prompt
  GenerationOptions gen;              // gen.logprobs: alternatives per token, -1 when logprobs are not asked
  PolicyOptions policy;               // the server's, with the request's attn/budget/fcs/fc_sharing/fc_rank
};

// `defaults`: the server's policy. Throws BadRequest, also for an OpenAI field the server does not
// honour (tools, response_format, penalties...) unless it holds the value that means "off".
CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint, const RequestDefaults& limits,
                                           const PolicyOptions& defaults);

}  // namespace fasa
