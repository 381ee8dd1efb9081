// fasa serve's replies: OpenAI's and llama-server's bodies, log-probabilities and text offsets, and
// the server-sent events of a stream.
#include "server/server_impl.h"

namespace fasa {

namespace {

// OpenAI's token counts of one reply.
json usage(const Job& job, const GenerationResult& r) {
  const int64_t n_prompt = (int64_t)job.prompt.size();
  return {{"prompt_tokens", n_prompt},
          {"completion_tokens", r.n_tokens},
          {"total_tokens", n_prompt + r.n_tokens},
          {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens}}}};
}

// llama-server's `timings` of a reply, and fasa's `policy`: what attended (FASA asked for may run as full
// attention until there is a profile: the summary says so, and why).
json timings(const Job& job, const GenerationResult& r) {
  const int64_t prompt_n = (int64_t)job.prompt.size() - job.cached_tokens;
  return {{"cache_n", job.cached_tokens}, {"prompt_n", prompt_n}, {"prompt_ms", job.prompt_seconds * 1e3},
          {"prompt_per_second", job.prompt_seconds > 0 ? prompt_n / job.prompt_seconds : 0.0},
          {"predicted_n", r.n_tokens}, {"predicted_ms", r.seconds * 1e3},
          {"predicted_per_second", r.seconds > 0 ? r.n_tokens / r.seconds : 0.0},
          {"kv_bytes_per_token", job.decode_kv_bytes_per_token}, {"policy", job.policy_ran}};
}

}  // namespace

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

// One stream's server-sent events, in its endpoint's shape; the text offset its logprobs have reached
// and what has gone out carry from one event to the next.
struct Server::Impl::EventStream {
  const Impl& server;
  const Job& job;
  httplib::DataSink& sink;
  const bool chat = job.request.chat, llama = job.request.endpoint == Endpoint::llama_completion;
  const bool with_logprobs = job.request.gen.logprobs >= 0;
  TextOffset offset = with_logprobs ? server.first_offset(job) : TextOffset{};
  bool echo_pending = job.request.echo;  // with echo, the prompt goes first (its logprobs known once it is prefilled)
  size_t sent = 0;                       // generated tokens whose logprobs went out

  bool send(const json& j) {
    const std::string event = "data: " + dump(j) + "\n\n";
    return sink.write(event.data(), event.size());
  }
  json logprobs(std::span<const TokenLogprob> tokens) {
    return with_logprobs ? server.logprobs_json(chat, tokens, offset) : json(nullptr);
  }
  // A chunk's choice: chat's `delta`, or completions' `text`.
  json choice(json delta, std::string_view text, std::span<const TokenLogprob> tokens, json finish_reason) {
    return chat ? json{{"index", 0}, {"delta", delta}, {"logprobs", logprobs(tokens)}, {"finish_reason", finish_reason}}
                : json{{"index", 0}, {"text", text}, {"logprobs", logprobs(tokens)}, {"finish_reason", finish_reason}};
  }
  json piece_choice(std::string_view text, std::span<const TokenLogprob> tokens) {
    return choice({{"content", text}}, text, tokens, nullptr);
  }
  // Chat's first chunk gives the role.
  bool send_role() {
    return !chat ||
           send(server.chunk(job, {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}));
  }
  bool send_echo() {
    echo_pending = false;
    return send(server.chunk(job, piece_choice(server.engine.detokenize(job.prompt), job.prompt_logprobs)));
  }
  bool send_piece(std::string_view piece, std::span<const TokenLogprob> tokens) {
    if (echo_pending && !send_echo()) return false;
    sent += tokens.size();
    if (llama) return send({{"content", piece}, {"stop", false}, {"id_slot", job.slot->index}});
    return send(server.chunk(job, piece_choice(piece, tokens)));
  }

  // llama-server's stream ends with the whole reply's counts, no [DONE].
  bool send_llama_end(const GenerationResult& r) {
    json end = server.llama_body(job, r);
    end["content"] = "";
    if (!send(end)) return false;
    sink.done();
    return true;
  }
  // The last chunk has the logprobs of tokens whose text never went out (a stop string's); as OpenAI, with
  // include_usage one more chunk with the usage and no choices; then [DONE].
  bool send_openai_end(const GenerationResult& r) {
    const std::span<const TokenLogprob> rest = std::span(r.logprobs).subspan(std::min(sent, r.logprobs.size()));
    const json last = choice(json::object(), "", rest, name_of(r.finish_reason));
    json last_chunk = server.chunk(job, last);
    last_chunk["timings"] = timings(job, r);  // as llama-server's last chunk (the chat page shows them)
    if (!send(last_chunk)) return false;
    if (job.request.include_usage) {
      json tail = server.chunk(job, last);
      tail["choices"] = json::array();
      tail["usage"] = usage(job, r);
      if (!send(tail)) return false;
    }
    const std::string done = "data: [DONE]\n\n";
    if (!sink.write(done.data(), done.size())) return false;
    sink.done();
    return true;
  }
};

// Server-sent events: one chunk per piece of text (with its tokens' logprobs when asked), a last chunk
// with finish_reason, with stream_options.include_usage one more with the usage and no choices, then
// [DONE]; /completion's as llama-server's. False when the client went away.
bool Server::Impl::stream(const std::shared_ptr<Job>& job, httplib::DataSink& sink) {
  EventStream events{*this, *job, sink};
  if (!events.send_role()) return false;
  GenerationResult r;
  try {
    r = generate(*job, [&](std::string_view piece, std::span<const TokenLogprob> tokens) {
      return events.send_piece(piece, tokens);
    });
  } catch (const std::exception& e) {
    events.send(error_body(500, e.what()));
    sink.done();
    return true;
  }
  if (r.finish_reason == FinishReason::Cancelled || (events.echo_pending && !events.send_echo())) return false;
  return events.llama ? events.send_llama_end(r) : events.send_openai_end(r);
}

}  // namespace fasa
