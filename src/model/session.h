#pragma once
// One decoding context over a loaded model: the KV cache, the selection policy and scratch space.
// prefill() runs prompt tokens through batched dense attention; decode() runs one generated token
// through the decode path, where the policy picks the rows each head reads.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "model/device.h"
#include "model/experts.h"
#include "ops/matmul.h"
#include "model/model.h"
#include "select/attention_policy.h"

namespace fasa {

// Sees each layer's post-RoPE queries right after that layer's keys and values were cached (so
// cache rows 0..p0+n-1 hold the layer's keys). Used by calibration and CA measurement.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  // q: [n, n_head * head_dim] in model dim order, for positions p0..p0+n-1.
  virtual void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) = 0;
};

struct SessionOptions {
  int64_t n_ctx = 0;      // 0: the model's training context
  int n_ubatch = 256;     // prefill tokens per forward chunk (bounds scratch memory)
  CacheOptions cache;     // element types (F16 by default, F32 exact, Q8_0) and FASA-M's tier for K_rest and V
  // Tokens truncate() can always go back over. A sliding-window layer keeps its window plus this (or
  // the ubatch, whichever is more) in its cache; beyond, truncate() starts again from 0.
  int64_t n_rewind = 64;
  // Where set, the whole forward pass runs there, with its own KV cache, selecting as the policy's
  // DeviceSelection says (full, FASA, Quest; FASA-M where `offload` is the RAM tier), one sequence per
  // pass: prefill and decode hand it their tokens. Must outlive the session.
  const DeviceModel* device = nullptr;
};

class Session;
class ForwardPass;

// The key layouts a session of `policy` caches with, [n_layer * n_head_kv]: the policy's, and the
// identity for sliding layers, which it never sees.
std::vector<KeyLayout> key_layouts(const AttentionPolicy& policy, const ModelConfig& c);

// One session's new tokens in a forward pass over several sessions (eval_together); Session::prefill
// and decode are eval_together over their session alone. Cut into passes there (ForwardPart: a
// session's slice of one pass), and nowhere else.
struct SessionTokens {
  Session* session = nullptr;
  std::span<const int32_t> tokens;  // a prompt's tokens (dense prefill), or the one token of a decode step
  bool decode = false;              // a decode step (Session::decode); else Session::prefill
  std::vector<float>* all_logits = nullptr;  // a prompt's: every token's logits, [tokens.size(), n_vocab]
};

// One forward pass for several sessions of the same model: every matmul runs over all their new tokens
// at once (each weight row read once for the whole batch), attention over each session's own cache
// with its own policy. Each session ends as its own prefill(tokens) or decode(token) would leave it: in the same state, its
// logits bit for bit the same while the pass holds at most kMatmulSmallBatch tokens, within rounding
// beyond. More than `max_pass_tokens` tokens (0: the first session's ubatch) go in several passes,
// decode steps first.
void eval_together(std::span<const SessionTokens> batch, int max_pass_tokens = 0);

class Session {
 public:
  // `policy` defaults to full attention.
  Session(const Model& model, SessionOptions opts, std::shared_ptr<AttentionPolicy> policy = nullptr);

  // Prompt tokens at positions n_past()..: dense causal attention (the policy sees the queries, as
  // H2O and SnapKV need). Returns the last one's logits ([n_vocab]); with `all_logits`, also every
  // token's ([tokens.size(), n_vocab]).
  std::span<const float> prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);
  // A decode step: `token` at position n_past(), each head attending to the rows its policy picks.
  // Returns its logits ([n_vocab]).
  std::span<const float> decode(int32_t token);

  int64_t n_past() const { return n_past_; }
  std::span<const float> logits() const { return logits_; }  // [n_vocab] of the last evaluated token
  int64_t n_ctx() const { return n_ctx_; }
  const KvCache& cache() const { return cache_; }  // (a device's session keeps its cache there: this one is empty)
  KvMemory kv_memory() const;  // where the cache is and what it takes, on the CPU or the device (rss left 0)
  // The most bytes forward()'s buffers take for this session: activations, quantized activations and a
  // mixture of experts' buffers for a pass of a whole ubatch, and the logits.
  size_t scratch_bytes() const;
  const DeviceSession* device() const { return device_.get(); }  // null: the CPU runs it
  const Model& model() const { return model_; }
  void reset() { truncate(0); }
  // Forgets positions >= n (n <= n_past()), so a benchmark can decode again from the same depth.
  // Returns the positions kept: n, or 0 where a sliding window's cache no longer holds the rows
  // position n would see (more than SessionOptions::n_rewind back); then feed them again.
  int64_t truncate(int64_t n);
  // Appends n positions of random keys and values (unit variance, like normed activations) to every
  // layer instead of a prefill: decode speed at a depth without the prefill's cost. The policy sees
  // no prefill queries.
  void fill_random(int64_t n, uint64_t seed);
  void set_observer(AttentionObserver* obs) { observer_ = obs; }

  // Starts this (empty) session from a dense prefill done by `dense` (identity key layout, same
  // model): copies its cache rows and logits, and shows this session's policy the prefill queries
  // (`queries[l]`: [n_past, n_head * head_dim] per layer) as its own prefill would have. Lets many
  // policies share one prefill of a long prompt.
  void start_from_prefill(const Session& dense, const std::vector<std::vector<float>>& queries);
  // Goes on with another policy: the cached rows move into its key layout (no offloaded cache). The
  // policy sees none of the earlier queries: for policies that keep no per-query state (FASA; H2O and
  // SnapKV would start with no votes).
  void set_policy(std::shared_ptr<AttentionPolicy> policy);

 private:
  friend void eval_together(std::span<const SessionTokens> batch, int max_pass_tokens);
  friend class ForwardPass;  // forward()'s steps (forward.cpp)
  // One session's slice of its SessionTokens in a forward pass.
  struct ForwardPart {
    Session* session;
    const int32_t* tokens;
    int n;
    bool decode;        // one token, through the policy (else a dense prefill chunk)
    float* logits;      // null: none wanted; else [n_vocab] of the last token, or [n, n_vocab] with all_logits
    bool all_logits;
  };
  // One forward pass over every part's tokens, all of the same model.
  static void forward(std::span<const ForwardPart> parts);
  void forward_on_device(const ForwardPart& part);  // the pass of a session on a device (its only part)
  // Throws unless `tokens` fit this session's context and vocabulary.
  void check_tokens(std::span<const int32_t> tokens) const;
  void check_logits() const;  // NaN/Inf logits name the model file
  // Dense causal attention of prefill tokens p0..p0+n-1 of `layer`, one KV head at a time (an
  // offloaded head's rows are fetched once for all the tokens).   q, att: [n, n_head * head_dim]
  void prefill_attention(int layer, int64_t p0, int n, const float* q, float* att) const;

  const Model& model_;
  std::shared_ptr<AttentionPolicy> policy_;
  AttentionObserver* observer_ = nullptr;
  int64_t n_ctx_;
  KvCache cache_;  // one position where the device holds the cache
  std::unique_ptr<DeviceSession> device_;
  int n_ubatch_;
  int64_t max_chunk_;  // a pass's most tokens of this session (the ubatch where a sliding window's ring bounds it)
  int64_t n_past_ = 0;
  std::vector<float> inv_freq_;        // [n_rot/2]
  std::vector<float> inv_freq_local_;  // [n_rot/2] the sliding layers' (Gemma 3), else empty
  std::vector<float> logits_;    // [n_vocab] of the last evaluated token
  // forward()'s activations for n tokens, kept between calls: allocating them for every ubatch and
  // decode step cost page faults and clearing (a tenth of a small model's prefill).
  struct Activations {
    std::vector<float> x, xb;       // [n, E] residual stream; normed input / projection output
    std::vector<float> q, att;      // [n, H*D] queries; attention output per head
    std::vector<float> k, v;        // [n, HKV*D]
    std::vector<float> gate, up;    // [n, F]
    std::vector<float> cs;          // [n, n_rot/2, 2] RoPE cos/sin per position
    std::vector<float> cs_local;    // [n, n_rot/2, 2] the sliding layers' (Gemma 3), else empty
    ExpertScratch experts;          // a mixture of experts' buffers
  } act_;
};

}  // namespace fasa
