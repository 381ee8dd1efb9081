// The public API (include/fasa/fasa.h) over the engine's model, session, policy and sampler.
#include <omp.h>

#include <chrono>
#include <cstdio>

#include "api/generation.h"
#include "calib/auto_profile.h"
#include "calib/chunk_choice.h"
#include "gpu/device_loader.h"
#include "fasa/fasa.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "sparse/policy.h"
#include "util/memory.h"

namespace fasa {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Where a policy made with a profile ready found it: an automatic one was another prompt's.
std::string profile_note(const PolicyOptions& policy) {
  return policy_info(policy.attn).has_k_dom && wants_auto_profile(policy) ? "automatic profile of an earlier prompt" : "";
}

}  // namespace

Engine::Engine(const std::string& model_path, const EngineOptions& opts)
    : model_(load_model(model_path, {.pack_for_cpu = opts.gpu_layers == 0, .mmap = opts.mmap, .mlock = opts.mlock})),
      auto_profiles_(std::make_unique<AutoProfileStore>(*model_)) {
  const ModelConfig& c = model_->config;
  device_ = gpu::load_device_model(*model_, opts.gpu_layers, opts.device);
  const Tokenizer& tok = model_->tokenizer;
  auto piece = [&](int id) { return id >= 0 ? tok.piece(id) : std::string(); };
  info_ = {model_->path, model_->format, c.arch, model_->n_params(), c.n_ctx_train, c.n_vocab,
           chat_format_name(chat_style(*model_).format), model_->weight_bytes(),
           model_->held_weight_bytes(), model_->packed_weight_bytes(), model_->weights.locked_bytes, tok.memory_bytes(),
           device_ ? device_->describe() : "CPU", piece(tok.bos()), piece(tok.eos()), tok.add_bos()};
}

Engine::~Engine() = default;

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  return model_->tokenizer.encode(text, add_bos, parse_special);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids) const { return model_->tokenizer.decode(ids); }
std::string Engine::token_text(int32_t id) const { return model_->tokenizer.token_text(id); }

std::string Engine::chat_prompt(const std::vector<ChatMessage>& messages) const {
  return render_chat(chat_style(*model_), messages);
}

void Engine::check_policy(const PolicyOptions& policy) const { fasa::check_policy(policy, *model_, auto_profiles_.get()); }

Context::Context(const Engine& engine, const ContextOptions& opts) : engine_(engine), opts_(opts) {
  const Model& m = engine.model();
  AutoProfileStore* autos = &engine.auto_profiles();
  SessionOptions so = session_options(opts.policy, opts.n_ctx > 0 ? opts.n_ctx : m.config.n_ctx_train);
  so.device = engine.device();
  if (so.device && !opts.custom_policy && !policy_info(opts.policy.attn).gpu) {
    std::string on_gpu;  // the registry's rows that select on the device
    for (const PolicyInfo& p : policy_registry())
      if (p.gpu) on_gpu += (on_gpu.empty() ? "" : ", ") + p.name;
    throw Error("--attn " + opts.policy.attn + " runs on the CPU only in this version (" + on_gpu + " run on the GPU): drop -ngl");
  }
  auto_pending_ = !opts.custom_policy && auto_profile_pending(opts.policy, autos);
  if (opts.custom_policy) {
    policy_ = opts.custom_policy;
  } else if (auto_pending_) {  // dense until a profile exists; measuring, if this context can hold enough tokens
    fasa::check_policy(opts.policy, m, autos);
    if (so.device)  // (the prompt's queries are measured on the CPU)
      throw Error("--attn " + opts.policy.attn + " on the GPU needs a profile: `fasa calibrate -m MODEL -o P`, then --profile P");
    policy_ = std::make_shared<FullAttention>();
    if (so.n_ctx >= PromptProfiler::kMinTokens) profiler_ = std::make_unique<PromptProfiler>(m);
  } else {
    policy_ = make_policy(opts.policy, m, autos);
    profile_note_ = profile_note(opts.policy);
  }
  session_ = std::make_unique<Session>(m, so, policy_);
  session_->set_observer(profiler_.get());
}

Context::~Context() = default;

std::span<const float> Context::logits() {
  if (!unevaluated_.empty()) feed_tokens({});
  if (session_->n_past() == 0) throw Error("logits: nothing was fed");
  return session_->logits();
}

const char* name_of(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "?";
}

ContextStats Context::stats() const {
  ContextStats s = stats_;
  s.kv_bytes_read = session_->cache().bytes_read();
  return s;
}

int64_t Context::n_past() const { return session_->n_past() + (int64_t)unevaluated_.size(); }
int64_t Context::n_cached() const { return session_->n_past(); }
int64_t Context::n_ctx() const { return session_->n_ctx(); }

void Context::prefill(std::span<const int32_t> ids, std::vector<float>* all_logits) {
  if (opts_.threads > 0) omp_set_num_threads(opts_.threads);
  session_->prefill(ids, all_logits);
  after_eval(true);
}

void Context::decode(int32_t token) {
  if (opts_.threads > 0) omp_set_num_threads(opts_.threads);
  const uint64_t before = session_->cache().bytes_read();
  session_->decode(token);
  stats_.decode_kv_bytes_read += session_->cache().bytes_read() - before;
  ++stats_.decode_steps;
  after_eval(false);
}

void Context::after_eval(bool prefill) {
  if (!auto_pending_) return;
  AutoProfileStore& autos = engine_.auto_profiles();
  if (profiler_ && profiler_->ready(session_->n_past())) {
    // (another context may have kept one meanwhile: then its chunk choice's probe is not run here)
    const std::optional<Profile> earlier = autos.find();
    const KeptProfile kept = earlier ? KeptProfile{*earlier, false, ""} : autos.keep(profiler_->profile(tokens_));
    const std::string check = choice_warning(kept.profile);  // the self-check, as `fasa calibrate` prints it
    go_sparse((!kept.mine ? "automatic profile of an earlier prompt"
                          : "automatic profile from this prompt's first " + std::to_string(PromptProfiler::kMinTokens) +
                                " tokens" + (kept.file.empty() ? std::string() : ", cached in " + kept.file)) +
              (check.empty() ? "" : "; " + check));
  } else if (prefill) {  // another context (a server slot) may have made one since
    if (autos.find()) go_sparse("automatic profile of an earlier prompt");
  }
}

void Context::go_sparse(std::string note) {
  try {  // the policy asked for (FASA or DoubleSparse), with the profile the engine now keeps
    std::shared_ptr<AttentionPolicy> sparse = make_policy(opts_.policy, engine_.model(), &engine_.auto_profiles());
    session_->set_policy(sparse);  // fasa::Error: over --kv-fast-limit, the cache unchanged
    policy_ = std::move(sparse);
  } catch (const Error& e) {  // stay dense rather than fail this and every later eval
    note = std::string("dense: ") + e.what();
  }
  session_->set_observer(nullptr);
  profiler_.reset();
  auto_pending_ = false;
  profile_note_ = std::move(note);
}

int64_t Context::feed(std::string_view text, bool parse_special) {
  const std::vector<int32_t> ids = engine_.tokenize(text, n_past() == 0, parse_special);
  feed_tokens(ids);
  return (int64_t)ids.size();
}

Context::Feed Context::take_feed(const std::vector<int32_t>& ids) {
  const int64_t n_all = (int64_t)(unevaluated_.size() + ids.size());
  if (session_->n_past() + n_all > n_ctx())
    throw Error("the prompt (" + std::to_string(session_->n_past() + n_all) + " tokens) does not fit the context of " +
                std::to_string(n_ctx()) + " tokens");
  for (int32_t t : ids)
    if (t < 0 || t >= engine_.info().n_vocab) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
  Feed feed{std::move(unevaluated_), ids.empty() && unevaluated_generated_};
  unevaluated_.clear();
  unevaluated_generated_ = false;
  feed.tokens.insert(feed.tokens.end(), ids.begin(), ids.end());
  stats_.prompt_tokens += (int64_t)ids.size();
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  return feed;
}

void Context::feed_tokens(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs, int top_n) {
  if (unevaluated_.empty() && ids.empty()) return;
  const Feed feed = take_feed(ids);
  const std::vector<int32_t>& all = feed.tokens;
  const auto t0 = Clock::now();
  if (logprobs) logprobs->clear();
  if (feed.decode) {  // only the last generated token: the decode step generate() left for later
    decode(all[0]);
  } else if (!logprobs) {
    prefill(all);
  } else {  // what predicts ids[0]: the logits before this call, or the row of the pending token
    if (all.size() == ids.size()) logprobs->push_back(next_logprob(ids[0], top_n));
    // Chunks of a few hundred tokens bound the logits kept ([chunk, n_vocab]).
    const size_t V = (size_t)engine_.info().n_vocab, first = all.size() - ids.size(), chunk = 256;
    std::vector<float> rows;  // [chunk, n_vocab]
    for (size_t at = 0; at < all.size();) {
      const size_t n = std::min(chunk, all.size() - at);
      prefill({all.data() + at, n}, &rows);
      for (size_t i = std::max(at + 1, first + logprobs->size()); i < at + n + 1 && i < all.size(); ++i)
        logprobs->push_back(token_logprob(i < at + n ? std::span<const float>(rows.data() + (i - at - 1) * V, V)
                                                     : session_->logits(),
                                          all[i], top_n));
      at += n;
    }
  }
  stats_.prompt_seconds += seconds_since(t0);
}

TokenLogprob Context::next_logprob(int32_t id, int top_n) const {
  return session_->n_past() > 0 ? token_logprob(session_->logits(), id, top_n) : TokenLogprob{id, false, 0, {}};
}

void Context::decode_tokens(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs, int top_n) {
  if (!unevaluated_.empty()) feed_tokens({});
  if (logprobs) logprobs->clear();
  const auto t0 = Clock::now();
  take_feed(ids);  // checks them all before the first step
  for (int32_t id : ids) {
    if (logprobs) logprobs->push_back(next_logprob(id, top_n));
    decode(id);
  }
  stats_.prompt_seconds += seconds_since(t0);
}

void Context::truncate(int64_t n) {
  if (n < 0 || n > n_past()) throw Error("truncate: " + std::to_string(n) + " is not within 0.." + std::to_string(n_past()));
  if (n <= session_->n_past()) {
    // The logits of position n-1 are gone with the rows after it: that token waits to be evaluated
    // again, so the next feed or generate starts from its logits.
    // (A sliding window's cache may keep fewer: those go again too.)
    const int64_t kept = session_->truncate(std::max<int64_t>(0, n - 1));
    unevaluated_.assign(tokens_.begin() + kept, tokens_.begin() + n);
    unevaluated_generated_ = false;  // positions to evaluate again: a prefill, as a fresh context's would
  } else {
    unevaluated_.resize(n - session_->n_past());  // the pending tokens before n
    unevaluated_generated_ = unevaluated_generated_ && !unevaluated_.empty();
  }
  tokens_.resize(n);
}

bool Context::prefix_reuse_is_exact() const { return policy_->truncate_is_exact(); }

bool Context::decode_is_dense() const { return !opts_.custom_policy && policy_info(opts_.policy.attn).dense; }

bool Context::can_switch_policy(const PolicyOptions& policy) const {
  if (policy == opts_.policy && !opts_.custom_policy) return true;
  // The rows move into another key order: exact for f16 and f32 keys, not for int8 blocks of 32
  // (Q8_0 keys, TIP's int8 copy), which would be quantized again from quantized values.
  const CacheOptions& c = policy.cache;
  return !opts_.custom_policy && !engine_.device() && c == opts_.policy.cache && !c.offload.offloaded() &&
         c.types.k != DType::Q8_0 && !c.types.tip_int8 && !policy_info(policy.attn).votes &&
         !auto_profile_pending(policy, &engine_.auto_profiles());
}

bool Context::switch_policy(const PolicyOptions& policy) {
  if (!can_switch_policy(policy)) return false;
  if (policy == opts_.policy) return true;
  std::shared_ptr<AttentionPolicy> next = make_policy(policy, engine_.model(), &engine_.auto_profiles());
  session_->set_policy(next);
  policy_ = std::move(next);
  opts_.policy = policy;
  session_->set_observer(nullptr);  // an automatic profile being measured for the old policy: not now
  profiler_.reset();
  auto_pending_ = false;
  profile_note_ = profile_note(policy);
  return true;
}

std::unique_ptr<Context::Generation> Context::start_generation(const GenerationOptions& opts, const TextCallback& on_text) {
  if (!unevaluated_.empty()) feed_tokens({});
  check_generation(opts, session_->n_past() > 0);
  return std::make_unique<Generation>(opts, on_text);
}

int32_t Context::next_token(Generation& g) {
  GenerationResult& r = g.r;
  if (r.n_tokens >= g.opts.max_tokens) return -1;
  const Tokenizer& tok = engine_.model().tokenizer;
  const int32_t next = g.sampler.sample(session_->logits());
  if (tok.is_end_of_generation(next) && !g.opts.ignore_eos) {
    r.finish_reason = FinishReason::Stop;
    return -1;
  }
  ++r.n_tokens;
  r.tokens.push_back(next);
  tokens_.push_back(next);
  if (g.opts.logprobs >= 0) {
    r.logprobs.push_back(token_logprob(session_->logits(), next, g.opts.logprobs));
    if (g.opts.on_logprob) g.opts.on_logprob(r.logprobs.back());
  }
  const std::string piece = g.stream.push(tok.token_text(next));
  if (g.stream.stopped()) r.finish_reason = FinishReason::Stop;
  if (!g.emit(piece)) r.finish_reason = FinishReason::Cancelled;
  // The last token is evaluated only if the context goes on (a later feed or generate).
  if (r.finish_reason != FinishReason::Length || r.n_tokens == g.opts.max_tokens || session_->n_past() == n_ctx()) {
    unevaluated_ = {next};
    unevaluated_generated_ = true;
    return -1;
  }
  return next;
}

GenerationResult Context::finish_generation(Generation& g) {
  if (g.r.finish_reason != FinishReason::Cancelled) g.emit(g.stream.finish());
  g.r.seconds = seconds_since(g.t0);
  stats_.generated_tokens += g.r.n_tokens;
  stats_.decode_seconds += g.r.seconds;
  return std::move(g.r);
}

GenerationResult Context::generate(const GenerationOptions& opts, const TextCallback& on_text) {
  const std::unique_ptr<Generation> g = start_generation(opts, on_text);
  for (int32_t next; (next = next_token(*g)) >= 0;) decode(next);
  return finish_generation(*g);
}

KvMemory Context::kv_memory() const {
  KvMemory m = session_->kv_memory();
  m.rss = resident_memory_bytes();
  return m;
}

MemoryEstimate Context::memory_estimate() const {
  const KvMemory kv = session_->kv_memory();
  return {engine_.info().held_weight_bytes, engine_.info().vocab_bytes,
          kv.fast + (kv.rows.on_disk ? 0 : kv.slow), session_->scratch_bytes()};
}

std::string Context::policy_summary() const {
  if (profiler_)
    return opts_.policy.attn + ": full attention until the context holds " + std::to_string(PromptProfiler::kMinTokens) +
           " tokens, whose prefill makes the automatic profile";
  if (auto_pending_)
    return opts_.policy.attn + ": full attention (no profile of this model yet, and this context is too short to "
                               "measure one: it needs " + std::to_string(PromptProfiler::kMinTokens) + " tokens)";
  return policy_->summary() + (profile_note_.empty() ? "" : " (" + profile_note_ + ")");
}

}  // namespace fasa
