// The Llama-family forward pass, top to bottom:
// token -> embed -> per layer: norm -> QKV (+bias) -> RoPE -> append K, V -> select rows per head ->
// gathered attention -> output proj -> residual -> norm -> SwiGLU MLP -> residual -> norm -> logits.
// (Gemma 3 adds the embedding's scale, the norms of the attention's and the MLP's outputs, GeGLU, and
// sliding-window layers that attend densely to their window.)
// Session::forward (one pass over the new tokens of one or several sessions, its steps in ForwardPass)
// and the dense prefill attention it uses; the rest of Session is in session.cpp.
#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <vector>

#include <omp.h>

#include "model/session.h"
#include "ops/attention.h"
#include "ops/causal_attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/packed_rows.h"
#include "select/group_attention.h"

namespace fasa {

// A sliding window's slices when its decode step would leave threads idle: 512 rows of Gemma 3's
// 4 heads of 256 dims take ~40 us on one Zen 4 thread, a task a few.
constexpr int64_t kMinRowsPerWindowSlice = 256;

void Session::prefill_attention(int l, int64_t p0, int n, const float* q, float* att) const {
  const ModelConfig& c = model_.config;
  const int D = c.head_dim, group = c.n_head / c.n_head_kv, q_dim = c.n_head * D;
  const float scale = c.attention_scale();
  const int64_t window = c.sliding(l) ? c.sliding_window : 0;
  const int64_t lo = window ? std::max<int64_t>(0, p0 - window + 1) : 0;  // the first position any of them sees
  for (int g = 0; g < c.n_head_kv; ++g) {
    KvHeadView kv = cache_.view(l, g, lo, p0 + n);  // row r: position lo + r
    GatheredRows fetched;
    if (cache_.offloaded(l, g)) {
      std::vector<int32_t> all(p0 + n);  // [p0 + n] every row, in order: the view's prefixes stay causal
      std::iota(all.begin(), all.end(), 0);
      kv = cache_.gather(l, g, all.data(), p0 + n, false, fetched);
    }
    // Positions that see fewer than kBlockedPrefillRows rows attend one at a time, exactly as a decode
    // step would (attention is a small part of their cost); later ones go in blocks whose queries
    // (positions x the group's heads) share every key and value row as it is read. The most costly
    // tasks (the last blocks) are handed out first.
    const int singles = (int)std::clamp<int64_t>(kBlockedPrefillRows - 1 - p0, 0, n);
    const int per_block = std::max(1, kCausalBlockQueries / group);
    const int blocks = (n - singles + per_block - 1) / per_block;
#pragma omp parallel
    {
      std::vector<float> qb((size_t)per_block * group * D);  // [per_block, group, D] in the cache's dim order
#pragma omp for schedule(dynamic)
      for (int task = 0; task < blocks + singles; ++task) {
        const int t0 = task < blocks ? singles + (blocks - 1 - task) * per_block : task - blocks;
        const int np = task < blocks ? std::min(per_block, n - t0) : 1;
        for (int t = 0; t < np; ++t)
          for (int i = 0; i < group; ++i)
            cache_.permute_query(l, g, &q[(size_t)(t0 + t) * q_dim + (size_t)(g * group + i) * D],
                                 &qb[((size_t)t * group + i) * D]);
        float* out = &att[(size_t)t0 * q_dim + (size_t)g * group * D];
        const int64_t p = p0 + t0;  // the block's first position
        if (task < blocks) {
          causal_block_attention(qb.data(), np, group, kv, p + 1 - lo, scale, out, q_dim, window);
        } else {
          const int64_t from = window ? std::max(lo, p - window + 1) : 0;
          KvHeadView causal = kv.from_row(from - lo);
          causal.n_tokens = p + 1 - from;
          grouped_attention(qb.data(), group, causal, nullptr, causal.n_tokens, scale, out);
        }
      }
    }
  }
}

// One forward pass over every part's new tokens, in the steps Session::forward takes in order. Part i's
// tokens are rows at[i]..at[i + 1] - 1 of every activation (the first session's scratch, act_).
class ForwardPass {
 public:
  using Part = Session::ForwardPart;
  explicit ForwardPass(std::span<const Part> parts);
  void embed();             // token embeddings (Gemma: scaled), and each position's RoPE cos/sin
  void attention(int l);    // norm, Q/K/V, RoPE, K/V appended, each part's attention, output, residual
  void feed_forward(int l); // (input normed by attention()) SwiGLU/GeGLU MLP or the experts, residual
  void logits();            // final norm and output projection of the rows whose logits are wanted

 private:
  void project_qkv(int l);       // xb -> q, k, v: matmuls, biases, Q/K norms, RoPE
  void append_kv(int l);         // k, v into each part's cache; observers and the policy see the prompt's q
  void decode_attention(int l);  // the decode parts' heads, through their policies, shared out among threads
  void add_attention_output(int l);  // att -> output projection -> residual; xb = the feed-forward's input

  std::span<const Part> parts_;
  Session& first_;
  const ModelConfig& c_;
  const ModelWeights& w_;
  const int E_, D_, H_, HKV_, F_, q_dim_, kv_dim_, group_, planes_;
  const float scale_;
  const bool local_rope_;           // sliding layers rotate with their own base
  std::vector<int> at_;             // [parts + 1]
  std::vector<const Part*> decoding_;  // the parts that are decode steps
  int n_ = 0;                       // tokens in the pass
  std::vector<int32_t> ids_;        // [n] token ids
  std::vector<int64_t> pos_;        // [n] their positions in their own sequences
  Session::Activations& a_;         // shapes: session.h
};

ForwardPass::ForwardPass(std::span<const Part> parts)
    : parts_(parts), first_(*parts[0].session), c_(first_.model_.config), w_(first_.model_.weights), E_(c_.n_embd),
      D_(c_.head_dim), H_(c_.n_head), HKV_(c_.n_head_kv), F_(c_.n_expert > 0 ? 0 : c_.n_ff), q_dim_(H_ * D_),
      kv_dim_(HKV_ * D_), group_(H_ / HKV_), planes_(c_.n_rot / 2), scale_(c_.attention_scale()),
      local_rope_(c_.sliding_window > 0), at_(parts.size() + 1, 0), a_(first_.act_) {
  for (size_t i = 0; i < parts.size(); ++i) {
    at_[i + 1] = at_[i] + parts[i].n;
    if (parts[i].decode) decoding_.push_back(&parts[i]);
  }
  n_ = at_.back();
  ids_.resize(n_), pos_.resize(n_);
  for (size_t i = 0; i < parts.size(); ++i)
    for (int t = 0; t < parts[i].n; ++t) {
      ids_[at_[i] + t] = parts[i].tokens[t];
      pos_[at_[i] + t] = parts[i].session->n_past_ + t;
    }
  for (auto [buf, per_token] : {std::pair{&a_.x, E_}, {&a_.xb, E_}, {&a_.q, q_dim_}, {&a_.att, q_dim_}, {&a_.k, kv_dim_},
                                {&a_.v, kv_dim_}, {&a_.gate, F_}, {&a_.up, F_}, {&a_.cs, planes_ * 2},
                                {&a_.cs_local, local_rope_ ? planes_ * 2 : 0}})
    buf->resize((size_t)n_ * per_token);  // every element is written before it is read
}

size_t Session::scratch_bytes() const {
  const ModelConfig& c = model_.config;
  const int64_t n = std::min<int64_t>(n_ubatch_, n_ctx_), q_dim = (int64_t)c.n_head * c.head_dim,
                kv_dim = (int64_t)c.n_head_kv * c.head_dim, F = c.n_expert > 0 ? 0 : c.n_ff;
  // the constructor's buffers above, then each token's activations rounded to int8 for the widest matmul
  // input (QuantizedActs: a byte per column, the block scales and sums about 1.5 more)
  int64_t floats = 2LL * c.n_embd + 2 * q_dim + 2 * kv_dim + 2 * F + (c.sliding_window > 0 ? 2 : 1) * c.n_rot;
  if (c.n_expert > 0) {  // ExpertScratch at its largest, and each thread's buffers of one expert's tokens
    const int threads = omp_get_max_threads(), own = c.n_expert >= 2 * threads ? threads : 1;  // (expert_ffn's choice)
    floats += c.n_expert + 2LL * c.n_expert_used + (c.n_expert_used + 1LL) * c.n_embd + own * (c.n_embd + 2LL * c.n_ff_exp);
  }
  const int64_t widest = std::max({(int64_t)c.n_embd, q_dim, (int64_t)c.n_ff, (int64_t)c.n_ff_exp});
  return (size_t)n * ((size_t)floats * sizeof(float) + (size_t)widest * 5 / 2) + (size_t)c.n_vocab * sizeof(float);
}

void ForwardPass::embed() {
  const float embd_scale = c_.embd_scale ? std::sqrt((float)E_) : 1.0f;
  const int n = n_, E = E_, planes = planes_;
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    thread_local std::vector<uint8_t> row;  // a packed (tied) embedding's row: its file pages were dropped
    dequantize_row(w_.tok_embd.type, file_row(w_.tok_embd, ids_[t], row), &a_.x[(size_t)t * E], E);
    if (c_.embd_scale)
      for (int i = 0; i < E; ++i) a_.x[(size_t)t * E + i] *= embd_scale;
    rope_cos_sin(first_.inv_freq_.data(), planes, pos_[t], &a_.cs[(size_t)t * planes * 2]);
    if (local_rope_) rope_cos_sin(first_.inv_freq_local_.data(), planes, pos_[t], &a_.cs_local[(size_t)t * planes * 2]);
  }
}

void ForwardPass::attention(int l) {
  project_qkv(l);
  append_kv(l);
  // Attention per sequence and KV head: the group of query heads sharing one reads each of its rows
  // once. Decode steps ask their policy for each head's rows; prompt chunks are dense and causal.
  if (!decoding_.empty()) decode_attention(l);
  for (size_t i = 0; i < parts_.size(); ++i)
    if (!parts_[i].decode)
      parts_[i].session->prefill_attention(l, parts_[i].session->n_past_, parts_[i].n, &a_.q[(size_t)at_[i] * q_dim_],
                                           &a_.att[(size_t)at_[i] * q_dim_]);
  add_attention_output(l);
}

void ForwardPass::project_qkv(int l) {
  const LayerWeights& L = w_.layers[l];
  const std::vector<float>& cs = c_.sliding(l) ? a_.cs_local : a_.cs;
  const int n = n_, E = E_, D = D_, H = H_, HKV = HKV_, q_dim = q_dim_, kv_dim = kv_dim_, planes = planes_;
  std::vector<float> &x = a_.x, &xb = a_.xb, &q = a_.q, &k = a_.k, &v = a_.v;
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) rms_norm(&x[(size_t)t * E], L.attn_norm.data(), E, c_.rms_eps, &xb[(size_t)t * E]);
  matmul(L.wq, xb.data(), n, q.data());
  matmul(L.wk, xb.data(), n, k.data());
  matmul(L.wv, xb.data(), n, v.data());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    if (c_.qkv_bias) {
      for (int i = 0; i < q_dim; ++i) q[(size_t)t * q_dim + i] += L.bq[i];
      for (int i = 0; i < kv_dim; ++i) {
        k[(size_t)t * kv_dim + i] += L.bk[i];
        v[(size_t)t * kv_dim + i] += L.bv[i];
      }
    }
    if (c_.qk_norm) {
      for (int h = 0; h < H; ++h) {
        float* qh = &q[(size_t)t * q_dim + h * D];
        rms_norm(qh, L.q_norm.data(), D, c_.rms_eps, qh);
      }
      for (int h = 0; h < HKV; ++h) {
        float* kh = &k[(size_t)t * kv_dim + h * D];
        rms_norm(kh, L.k_norm.data(), D, c_.rms_eps, kh);
      }
    }
    rope(&q[(size_t)t * q_dim], H, D, c_.n_rot, c_.rope_layout, &cs[(size_t)t * planes * 2]);
    rope(&k[(size_t)t * kv_dim], HKV, D, c_.n_rot, c_.rope_layout, &cs[(size_t)t * planes * 2]);
  }
}

void ForwardPass::append_kv(int l) {
  const bool sliding = c_.sliding(l);  // attends to its window densely; no policy or observer sees it
  for (size_t i = 0; i < parts_.size(); ++i) {
    Session& s = *parts_[i].session;
    const int64_t p0 = s.n_past_;
    const float* qi = &a_.q[(size_t)at_[i] * q_dim_];
    for (int t = at_[i]; t < at_[i + 1]; ++t)  // in order: an offloaded cache appends to its tail chunk
      for (int h = 0; h < HKV_; ++h)
        s.cache_.store(l, h, pos_[t], &a_.k[(size_t)t * kv_dim_ + h * D_], &a_.v[(size_t)t * kv_dim_ + h * D_]);
    if (sliding) continue;
    if (s.observer_) s.observer_->on_queries(l, p0, parts_[i].n, qi, s.cache_);
    if (!parts_[i].decode) s.policy_->observe_prefill(l, p0, parts_[i].n, qi, s.cache_);
  }
}

// All sequences' heads shared out among the threads together.
void ForwardPass::decode_attention(int l) {
  const bool sliding = c_.sliding(l);
  const int D = D_, HKV = HKV_, group = group_, q_dim = q_dim_;
  for (const Part* part : decoding_) part->session->cache_.begin_decode_layer(l);
  const int tasks = (int)decoding_.size() * HKV;
  std::exception_ptr failure;  // an offloaded read's error: it must not escape the parallel region
#pragma omp parallel
  {
    std::vector<float> qg((size_t)group * D);  // [group, D] the group's queries in the cache's dim order
    GroupAttentionScratch scratch;
#pragma omp for schedule(dynamic)
    for (int task = 0; task < tasks; ++task) {
      const Part& part = *decoding_[task / HKV];
      const Session& s = *part.session;
      const int g = task % HKV, t = at_[&part - parts_.data()];
      for (int i = 0; i < group; ++i)
        s.cache_.permute_query(l, g, &a_.q[(size_t)t * q_dim + (size_t)(g * group + i) * D], &qg[(size_t)i * D]);
      float* out = &a_.att[(size_t)t * q_dim + (size_t)g * group * D];
      try {
        if (sliding) {
          const int64_t from = std::max<int64_t>(0, s.n_past_ - c_.sliding_window + 1);
          const KvHeadView kv = s.cache_.view(l, g, from, s.n_past_ + 1);
          // (a window is short: with fewer KV heads than threads, it is shared out too; decided by
          // the model, not the batch, so a sequence's result does not depend on its batch)
          split_grouped_attention(qg.data(), group, kv, nullptr, kv.n_tokens, scale_, out,
                                  HKV < omp_get_num_threads() ? kMinRowsPerWindowSlice : kMinRowsPerSlice);
        } else {
          decode_group_attention(*s.policy_, l, g, s.n_past_, s.cache_, l, qg.data(), group, scale_, out, scratch);
        }
      } catch (...) {
#pragma omp critical(fasa_decode_failure)
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void ForwardPass::add_attention_output(int l) {
  const LayerWeights& L = w_.layers[l];
  const int n = n_, E = E_;
  std::vector<float> &x = a_.x, &xb = a_.xb;
  matmul(L.wo, a_.att.data(), n, xb.data());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    float* o = &xb[(size_t)t * E];
    if (c_.post_norms) rms_norm(o, L.post_attn_norm.data(), E, c_.rms_eps, o);
    for (int i = 0; i < E; ++i) x[(size_t)t * E + i] += o[i];
    rms_norm(&x[(size_t)t * E], L.ffn_norm.data(), E, c_.rms_eps, &xb[(size_t)t * E]);
  }
}

void ForwardPass::feed_forward(int l) {
  const LayerWeights& L = w_.layers[l];
  const int n = n_, E = E_, F = F_;
  std::vector<float> &x = a_.x, &xb = a_.xb, &gate = a_.gate, &up = a_.up;
  if (c_.n_expert > 0) {
    expert_ffn(c_, L, xb.data(), n, a_.experts);
    xb.swap(a_.experts.out);
  } else {
    matmul(L.w_gate, xb.data(), n, gate.data());
    matmul(L.w_up, xb.data(), n, up.data());
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; ++t)
      (c_.gelu_ffn ? geglu : swiglu)(&gate[(size_t)t * F], &up[(size_t)t * F], F);
    matmul(L.w_down, gate.data(), n, xb.data());
  }
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    float* o = &xb[(size_t)t * E];
    if (c_.post_norms) rms_norm(o, L.post_ffn_norm.data(), E, c_.rms_eps, o);
    for (int i = 0; i < E; ++i) x[(size_t)t * E + i] += o[i];
  }
}

// Only the rows whose logits are wanted go through the (large) output projection, all in one matmul.
void ForwardPass::logits() {
  const int E = E_;
  std::vector<int> rows;  // [R] the wanted rows of the pass
  for (size_t i = 0; i < parts_.size(); ++i)
    if (parts_[i].logits)
      for (int t = parts_[i].all_logits ? at_[i] : at_[i + 1] - 1; t < at_[i + 1]; ++t) rows.push_back(t);
  if (rows.empty()) return;
  for (size_t r = 0; r < rows.size(); ++r)
    rms_norm(&a_.x[(size_t)rows[r] * E], w_.output_norm.data(), E, c_.rms_eps, &a_.xb[r * E]);
  const size_t V = (size_t)c_.n_vocab;
  const auto wanting = std::count_if(parts_.begin(), parts_.end(), [](const Part& p) { return p.logits; });
  const bool one = wanting == 1;  // one part wants logits: they go straight to it
  std::vector<float> all(one ? 0 : rows.size() * V);  // [R, n_vocab] otherwise
  const auto target = std::find_if(parts_.begin(), parts_.end(), [](const Part& p) { return p.logits; });
  float* logits = one ? target->logits : all.data();  // [R, n_vocab]
  matmul(w_.output, a_.xb.data(), (int)rows.size(), logits);
  if (c_.final_softcap > 0) {
    const int64_t n_logits = (int64_t)(rows.size() * V);
    const float cap = c_.final_softcap;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_logits; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
  if (one) return;
  size_t r = 0;
  for (const Part& part : parts_)
    if (part.logits) {
      const size_t m = part.all_logits ? (size_t)part.n : 1;
      std::copy_n(&all[r * V], m * V, part.logits);
      r += m;
    }
}

void Session::forward(std::span<const ForwardPart> parts) {
  if (parts[0].session->device_) return parts[0].session->forward_on_device(parts[0]);  // (alone: eval_together)
  ForwardPass pass(parts);
  pass.embed();
  for (int l = 0; l < parts[0].session->model_.config.n_layer; ++l) {
    pass.attention(l);
    pass.feed_forward(l);
  }
  for (const ForwardPart& part : parts) part.session->n_past_ += part.n;
  pass.logits();
}

}  // namespace fasa
