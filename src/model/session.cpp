// A decoding context: the KV cache, the policy and the scratch of one sequence; prefill() and decode()
// batch tokens into forward passes (src/model/forward.cpp).
#include "model/session.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "fasa/error.h"

namespace fasa {

std::vector<KeyLayout> key_layouts(const AttentionPolicy& policy, const ModelConfig& c) {
  std::vector<KeyLayout> out;
  for (int l = 0; l < c.n_layer; ++l)
    for (int h = 0; h < c.n_head_kv; ++h) out.push_back(c.sliding(l) ? KeyLayout{} : policy.key_layout(l, h));
  return out;
}

namespace {

// Positions each layer's cache keeps: a sliding layer's window, the most tokens a pass appends before
// its first one attends (the ubatch), and the rewind.   [n_layer]; 0: all
std::vector<int64_t> ring_sizes(const ModelConfig& c, int64_t n_ctx, int n_ubatch, int64_t n_rewind) {
  std::vector<int64_t> ring(c.n_layer, 0);
  for (int l = 0; l < c.n_layer; ++l)  // (a ring of n_ctx or more is no ring)
    if (c.sliding(l)) ring[l] = c.sliding_window - 1 + std::max<int64_t>({n_ubatch, std::min(n_rewind, n_ctx), 1});
  return ring;
}
// The session's state on `device`, selecting as `policy` does; throws where the policy runs on the CPU only.
std::unique_ptr<DeviceSession> start_on_device(const DeviceModel& device, const AttentionPolicy& policy,
                                               const SessionOptions& opts, int64_t n_ctx, int n_layer) {
  if (opts.cache.types != KvTypes{} || opts.cache.offload.tier == KvOffloadOptions::Tier::File ||
      opts.cache.offload.fast_limit > 0)
    throw Error("the GPU keeps an F16 KV cache, in its memory or (--kv-offload ram) in host memory, in this version: "
                "drop --kv-type, --tip-int8, --kv-fast-limit and --kv-offload file:DIR, or -ngl");
  std::optional<DeviceSelection> selection = policy.device_selection(n_layer);
  if (!selection) throw Error("--attn " + std::string(policy.name()) + " runs on the CPU only in this version: drop -ngl");
  selection->host_kv = opts.cache.offload.offloaded();  // (session_options let only FASA and DoubleSparse offload)
  return device.start(n_ctx, *selection);
}
}  // namespace

Session::Session(const Model& model, SessionOptions opts, std::shared_ptr<AttentionPolicy> policy)
    : model_(model),
      policy_(policy ? std::move(policy) : std::make_shared<FullAttention>()),
      n_ctx_(opts.n_ctx > 0 ? opts.n_ctx : model.config.n_ctx_train),
      cache_(model.config.n_layer, model.config.n_head_kv, model.config.head_dim, opts.device ? 1 : n_ctx_,
             key_layouts(*policy_, model.config), opts.cache.types, opts.cache.offload,
             ring_sizes(model.config, n_ctx_, opts.n_ubatch > 0 ? opts.n_ubatch : 256, opts.n_rewind)),
      device_(opts.device ? start_on_device(*opts.device, *policy_, opts, n_ctx_, model.config.n_layer) : nullptr),
      n_ubatch_(opts.n_ubatch > 0 ? opts.n_ubatch : 256),
      max_chunk_(model.config.sliding_window > 0 ? n_ubatch_ : INT64_MAX),
      inv_freq_(model.config.rope_inv_freq()),
      inv_freq_local_(model.config.sliding_window > 0 ? model.config.rope_inv_freq(true) : std::vector<float>{}),
      logits_(model.config.n_vocab) {}

void Session::check_tokens(std::span<const int32_t> tokens) const {
  if (tokens.empty()) throw Error("no tokens to evaluate");
  if (n_past_ + (int64_t)tokens.size() > n_ctx_)
    throw Error("context is full: " + std::to_string(n_past_) + " + " + std::to_string(tokens.size()) +
                " tokens exceed the context size " + std::to_string(n_ctx_));
  for (int32_t t : tokens)
    if (t < 0 || t >= model_.config.n_vocab) throw Error("token id " + std::to_string(t) + " is outside the vocabulary");
}

void Session::check_logits() const {
  if (!std::all_of(logits_.begin(), logits_.end(), [](float x) { return std::isfinite(x); }))
    fail(model_.path, "the forward pass gave NaN or Inf logits: the weights hold NaN or Inf values");
}

std::span<const float> Session::prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  const SessionTokens me{this, tokens, false, all_logits};
  eval_together({&me, 1});
  return logits_;
}

std::span<const float> Session::decode(int32_t token) {
  const SessionTokens me{this, {&token, 1}, true};
  eval_together({&me, 1});
  return logits_;
}

void eval_together(std::span<const SessionTokens> batch, int max_pass_tokens) {
  if (batch.empty()) return;
  for (const SessionTokens& b : batch) {
    if (!b.session || &b.session->model_ != &batch[0].session->model_)
      throw Error("eval_together: the sessions must share one model");
    for (const SessionTokens& other : batch)
      if (&other != &b && other.session == b.session) throw Error("eval_together: a session appears twice");
    b.session->check_tokens(b.tokens);
    if (b.decode && b.tokens.size() != 1) throw Error("eval_together: a decode step takes one token");
    if (b.session->device_ && batch.size() > 1)
      throw Error("several sequences in one pass are not run on the device yet: one at a time, or on the CPU");
    if (b.all_logits) {
      if (b.decode || b.session->device_)
        throw Error(b.decode ? "eval_together: every token's logits are a prompt's"
                             : "every position's logits are not computed on the device yet: run on the CPU");
      b.all_logits->assign(b.tokens.size() * b.session->model_.config.n_vocab, 0.0f);
    }
  }
  // Pass after pass, at most max_pass_tokens each (the scratch memory's bound): every decode step in the
  // first (a pass holds at least one token of every session), prompts in chunks after them, in order.
  const int limit = max_pass_tokens > 0 ? max_pass_tokens : batch[0].session->n_ubatch_;
  const size_t ubatch = (size_t)std::max<int64_t>(limit, (int64_t)batch.size());
  std::vector<size_t> done(batch.size(), 0);  // tokens of batch[i] evaluated so far
  std::vector<size_t> order(batch.size());     // decode steps first
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return batch[i].decode; });
  for (bool more = true; more;) {
    std::vector<Session::ForwardPart> parts;
    size_t room = ubatch;
    for (size_t i : order) {
      if (room == 0) break;
      const std::span<const int32_t> ids = batch[i].tokens;
      if (done[i] == ids.size()) continue;
      const int n = (int)std::min<int64_t>(std::min(room, ids.size() - done[i]), batch[i].session->max_chunk_);
      const bool last = done[i] + n == ids.size();
      Session& s = *batch[i].session;
      float* logits = batch[i].all_logits ? batch[i].all_logits->data() + done[i] * s.model_.config.n_vocab
                      : last              ? s.logits_.data()
                                          : nullptr;
      parts.push_back({&s, ids.data() + done[i], n, batch[i].decode, logits, batch[i].all_logits != nullptr});
      done[i] += n;
      room -= n;
    }
    Session::forward(parts);
    more = false;
    for (size_t i = 0; i < batch.size(); ++i) more = more || done[i] < batch[i].tokens.size();
  }
  for (const SessionTokens& b : batch) {
    if (b.all_logits) std::copy(b.all_logits->end() - b.session->logits_.size(), b.all_logits->end(), b.session->logits_.begin());
    b.session->check_logits();
  }
}

int64_t Session::truncate(int64_t n) {
  if (n < 0 || n > n_past_) throw Error("truncate: " + std::to_string(n) + " is not within 0.." + std::to_string(n_past_));
  const ModelConfig& c = model_.config;
  for (int l = 0; l < c.n_layer; ++l) {
    const int64_t ring = cache_.ring(l);  // position n will see n - window + 1.. of the positions still held
    if (ring > 0 && std::max<int64_t>(0, n_past_ - ring) > std::max<int64_t>(0, n - c.sliding_window + 1)) n = 0;
  }
  n_past_ = n;
  if (!device_) cache_.truncate(n);  // (the device's rows from n on are written again)
  policy_->on_truncate(n);
  return n;
}

void Session::forward_on_device(const ForwardPart& part) {
  device_->forward(part.tokens, part.n, n_past_, part.decode, part.logits);
  n_past_ += part.n;
}

KvMemory Session::kv_memory() const {
  if (!device_) return cache_.memory();
  const ModelConfig& c = model_.config;
  KvMemory m;
  m.device = device_->kv_bytes();
  m.slow = device_->host_kv_bytes();
  m.rows.host_bytes = device_->host_read_bytes();
  m.full = (size_t)2 * c.n_layer * c.n_head_kv * c.head_dim * n_ctx_ * 2;  // F16 K and V
  return m;
}

void Session::fill_random(int64_t n, uint64_t seed) {
  if (n_past_ + n > n_ctx_)
    throw Error("fill: " + std::to_string(n_past_ + n) + " tokens exceed the context size " + std::to_string(n_ctx_));
  if (device_) device_->fill_random(n_past_, n, seed);
  else cache_.fill_random(n_past_, n, seed);
  n_past_ += n;
}

void Session::set_policy(std::shared_ptr<AttentionPolicy> policy) {
  if (device_) throw Error("a session on the device keeps the policy it started with");
  cache_.relayout(key_layouts(*policy, model_.config), n_past_);
  policy_ = std::move(policy);
}

void Session::start_from_prefill(const Session& dense, const std::vector<std::vector<float>>& queries) {
  const ModelConfig& c = model_.config;
  const int64_t n = dense.n_past_;
  if (n_past_ != 0 || &dense.model_ != &model_ || n > n_ctx_ || (int)queries.size() != c.n_layer || device_ ||
      dense.device_)
    throw Error("start_from_prefill: sessions do not match");
  for (int l = 0; l < c.n_layer; ++l)  // (a ring holds only its last positions: both must hold the same)
    if (cache_.ring(l) != dense.cache_.ring(l)) throw Error("start_from_prefill: the sliding windows' caches differ");
  std::vector<float> k(c.head_dim), v(c.head_dim);  // one row as float
  for (int l = 0; l < c.n_layer; ++l) {
    if (dense.cache_.layout(l, 0).n_dom != 0) throw Error("start_from_prefill: the source is not dense");
    const int64_t first = dense.cache_.ring(l) ? std::max<int64_t>(0, n - dense.cache_.ring(l)) : 0;  // still held
    for (int h = 0; h < c.n_head_kv; ++h) {
      const KvHeadView kv = dense.cache_.view(l, h, first, n);
      for (int64_t p = first; p < n; ++p) {
        kv_load(kv.k_rest_row(p - first), kv.k_type, c.head_dim, k.data());
        kv_load(kv.v_row(p - first), kv.v_type, c.head_dim, v.data());
        cache_.store(l, h, p, k.data(), v.data());
      }
    }
  }
  n_past_ = n;
  logits_ = dense.logits_;
  for (int l = 0; l < c.n_layer; ++l)
    if (!c.sliding(l)) policy_->observe_prefill(l, 0, (int)n, queries[l].data(), cache_);
}

}  // namespace fasa
