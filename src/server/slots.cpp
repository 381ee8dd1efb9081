// fasa serve's slots: a request parsed, checked and tokenized into a job on a slot, and the slot's
// context kept for the next request (its prompt cache).
#include "server/server_impl.h"

#include <algorithm>
#include <limits>

namespace fasa {

namespace {

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return (int64_t)i;
}

}  // namespace

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

  // The free slot whose cache holds the longest start of this prompt that the request's policy can go
  // on from (its own, or one it may take over: Context::can_switch_policy); among equals, the one used
  // least recently (its cache is the least likely to be wanted again).
  const int slot = slots.admission.enter([&](int s) {
    const SlotState& st = slots.state[s];
    const int64_t shared = st.ctx && st.ctx->can_switch_policy(r.policy) ? common_prefix(st.ctx->tokens(), job->prompt) : 0;
    return std::min(shared, st.reusable) * (int64_t)1'000'000'000 - (int64_t)(st.last_used % 1'000'000'000);
  });
  if (slot < 0) throw HttpError(503, "the server is busy: all slots and the queue are taken; retry later");
  job->slot = std::make_shared<SlotLease>(slots.admission, slot);
  slots.state[slot].last_used = slots.next_use++;
  job->id = (r.chat ? "chatcmpl-" : "cmpl-") + http.id_prefix + "-" + std::to_string(http.next_id++);
  job->created = unix_now();
  job->peer = PeerSocket(req.local_port, req.remote_addr, req.remote_port);
  return job;
}

// The slot's context for the job, holding what it already held of the prompt's start; `to_feed` gets
// the rest (for the scheduler to prefill), or nothing when the prompt's log-probabilities are wanted
// (echo), which are fed here, token by token. The slot's context goes on under the request's policy
// where it can take over the cache (the chat page's policy menu keeps the conversation's prefill); a
// new context where it cannot, or where the prompt and reply outgrow it (contexts grow in powers of two
// up to the slot's share, so short requests do not allocate a whole slot's KV cache).
Context& Server::Impl::prepare(Job& job, std::vector<int32_t>& to_feed) {
  SlotState& slot = slots.state[job.slot->index];
  const CompletionRequest& r = job.request;
  const int64_t n = (int64_t)job.prompt.size(), need = n + r.gen.max_tokens;
  if (slot.ctx && (slot.ctx->n_ctx() < need || !slot.ctx->can_switch_policy(r.policy))) slot.ctx.reset();
  const bool echo_logprobs = r.echo && r.gen.logprobs >= 0;  // every prompt token's logits are needed
  // Reused: the shared start, at most what was prefilled densely (a sparse policy's decoded tokens have
  // keys of a sparse pass), and never all of the prompt: its last token is evaluated again for its
  // logits, and truncate() evaluates the one before it again too, both prefilled as in a fresh context.
  // (A policy taking the cache over keeps no votes: a truncated cache is exact for it.)
  auto reused = [&](const Context& ctx) -> int64_t {
    const bool exact = ctx.options().policy != r.policy || ctx.prefix_reuse_is_exact();
    if (!r.cache_prompt || echo_logprobs || !exact) return 0;
    return std::max<int64_t>(0, std::min({common_prefix(ctx.tokens(), job.prompt), slot.reusable, n - 1}));
  };
  if (slot.ctx && slot.ctx->options().policy != r.policy) {
    try {  // only the rows this prompt keeps move into the new policy's layout
      slot.ctx->truncate(reused(*slot.ctx));
      slot.ctx->switch_policy(r.policy);
    } catch (...) {  // e.g. the new layout over --kv-fast-limit: a fresh context instead
      slot.ctx.reset();
    }
  }
  if (!slot.ctx) {
    ContextOptions co;
    co.policy = r.policy;
    co.n_ctx = std::min<int64_t>(slot_ctx, (int64_t)std::bit_ceil((uint64_t)std::max<int64_t>(need, 512)));
    co.threads = opts.threads;  // its own passes (an echo prompt's log-probabilities); the batch has its own
    slot.ctx = std::make_unique<Context>(engine, co);
  }
  Context& ctx = *slot.ctx;
  const int64_t keep = reused(ctx);
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
  const Context* ctx = slots.state[job.slot->index].ctx.get();
  std::lock_guard lock(slots.views_mu);
  SlotView& v = slots.views[job.slot->index];
  v = {processing, ctx ? ctx->n_ctx() : 0, ctx ? ctx->n_past() : 0, (int64_t)job.prompt.size(), job.cached_tokens,
       job.request.policy.attn, job.id};
}

json Server::Impl::slots_json() {
  json out = json::array();
  std::lock_guard lock(slots.views_mu);
  for (size_t i = 0; i < slots.views.size(); ++i) {
    const SlotView& v = slots.views[i];
    // n_ctx: what the slot may hold (as /props' default_generation_settings and llama-server say);
    // n_ctx_allocated: its cache now, grown as prompts need
    out.push_back({{"id", i}, {"is_processing", v.processing}, {"n_ctx", slot_ctx}, {"n_ctx_allocated", v.n_ctx},
                   {"n_past", v.n_past},
                   {"prompt_tokens", v.prompt_tokens}, {"cached_tokens", v.cached_tokens}, {"attn", v.attn},
                   {"id_task", v.id}});
  }
  return out;
}

}  // namespace fasa
