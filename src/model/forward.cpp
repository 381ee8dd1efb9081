// The Llama-family forward pass, top to bottom:
// token -> embed -> per layer: norm -> QKV (+bias) -> RoPE -> append K, V -> select rows per head ->
// gathered attention -> output proj -> residual -> norm -> SwiGLU MLP -> residual -> norm -> logits.
// (Gemma 3 adds the embedding's scale, the norms of the attention's and the MLP's outputs, GeGLU, and
// sliding-window layers that attend densely to their window.)
// Session::forward (one pass over the new tokens of one or several sessions) and the dense prefill
// attention it uses; the rest of Session is in session.cpp.
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

void Session::forward(std::span<const ForwardPart> parts) {
  Session& first = *parts[0].session;
  const Model& model = first.model_;
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int E = c.n_embd, D = c.head_dim, H = c.n_head, HKV = c.n_head_kv, F = c.n_expert > 0 ? 0 : c.n_ff;
  const int q_dim = H * D, kv_dim = HKV * D, group = H / HKV, planes = c.n_rot / 2;
  const float scale = c.attention_scale();
  const bool local_rope = c.sliding_window > 0;  // sliding layers rotate with their own base

  // The pass's tokens, part after part: part i's are rows at[i]..at[i] + n - 1 of every activation.
  std::vector<int> at(parts.size() + 1, 0);
  std::vector<const ForwardPart*> decoding;  // the parts that are decode steps
  for (size_t i = 0; i < parts.size(); ++i) {
    at[i + 1] = at[i] + parts[i].n;
    if (parts[i].decode) decoding.push_back(&parts[i]);
  }
  const int n = at.back();
  std::vector<int32_t> ids(n);  // [n] token ids
  std::vector<int64_t> pos(n);  // [n] their positions in their own sequences
  for (size_t i = 0; i < parts.size(); ++i)
    for (int t = 0; t < parts[i].n; ++t) {
      ids[at[i] + t] = parts[i].tokens[t];
      pos[at[i] + t] = parts[i].session->n_past_ + t;
    }

  Activations& a = first.act_;  // shapes: session.h; the first session's scratch serves the pass
  for (auto [buf, per_token] : {std::pair{&a.x, E}, {&a.xb, E}, {&a.q, q_dim}, {&a.att, q_dim}, {&a.k, kv_dim},
                                {&a.v, kv_dim}, {&a.gate, F}, {&a.up, F}, {&a.cs, planes * 2},
                                {&a.cs_local, local_rope ? planes * 2 : 0}})
    buf->resize((size_t)n * per_token);  // every element is written below before it is read
  std::vector<float> &x = a.x, &xb = a.xb, &q = a.q, &att = a.att, &k = a.k, &v = a.v, &gate = a.gate,
                     &up = a.up;

  const float embd_scale = c.embd_scale ? std::sqrt((float)E) : 1.0f;
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    dequantize_row(w.tok_embd.type, w.tok_embd.row(ids[t]), &x[(size_t)t * E], E);
    if (c.embd_scale)
      for (int i = 0; i < E; ++i) x[(size_t)t * E + i] *= embd_scale;
    rope_cos_sin(first.inv_freq_.data(), planes, pos[t], &a.cs[(size_t)t * planes * 2]);
    if (local_rope) rope_cos_sin(first.inv_freq_local_.data(), planes, pos[t], &a.cs_local[(size_t)t * planes * 2]);
  }

  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    const bool sliding = c.sliding(l);  // attends to its window densely; no policy or observer sees it
    const std::vector<float>& cs = sliding ? a.cs_local : a.cs;
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; ++t) rms_norm(&x[(size_t)t * E], L.attn_norm.data(), E, c.rms_eps, &xb[(size_t)t * E]);
    matmul(L.wq, xb.data(), n, q.data());
    matmul(L.wk, xb.data(), n, k.data());
    matmul(L.wv, xb.data(), n, v.data());
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; ++t) {
      if (c.qkv_bias) {
        for (int i = 0; i < q_dim; ++i) q[(size_t)t * q_dim + i] += L.bq[i];
        for (int i = 0; i < kv_dim; ++i) {
          k[(size_t)t * kv_dim + i] += L.bk[i];
          v[(size_t)t * kv_dim + i] += L.bv[i];
        }
      }
      if (c.qk_norm) {
        for (int h = 0; h < H; ++h) {
          float* qh = &q[(size_t)t * q_dim + h * D];
          rms_norm(qh, L.q_norm.data(), D, c.rms_eps, qh);
        }
        for (int h = 0; h < HKV; ++h) {
          float* kh = &k[(size_t)t * kv_dim + h * D];
          rms_norm(kh, L.k_norm.data(), D, c.rms_eps, kh);
        }
      }
      rope(&q[(size_t)t * q_dim], H, D, c.n_rot, c.rope_layout, &cs[(size_t)t * planes * 2]);
      rope(&k[(size_t)t * kv_dim], HKV, D, c.n_rot, c.rope_layout, &cs[(size_t)t * planes * 2]);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      Session& s = *parts[i].session;
      const int64_t p0 = s.n_past_;
      const float* qi = &q[(size_t)at[i] * q_dim];
      for (int t = at[i]; t < at[i + 1]; ++t)  // in order: an offloaded cache appends to its tail chunk
        for (int h = 0; h < HKV; ++h)
          s.cache_.store(l, h, pos[t], &k[(size_t)t * kv_dim + h * D], &v[(size_t)t * kv_dim + h * D]);
      if (sliding) continue;
      if (s.observer_) s.observer_->on_queries(l, p0, parts[i].n, qi, s.cache_);
      if (!parts[i].decode) s.policy_->observe_prefill(l, p0, parts[i].n, qi, s.cache_);
    }

    // Attention per sequence and KV head: the group of query heads sharing one reads each of its rows
    // once. Decode steps ask their policy for each head's rows, all sequences' heads shared out among
    // the threads together; prompt chunks are dense and causal.
    if (!decoding.empty()) {
      for (const ForwardPart* part : decoding) part->session->cache_.begin_decode_layer(l);
      const int tasks = (int)decoding.size() * HKV;
      std::exception_ptr failure;  // an offloaded read's error: it must not escape the parallel region
#pragma omp parallel
      {
        std::vector<float> qg((size_t)group * D);  // [group, D] the group's queries in the cache's dim order
        GroupAttentionScratch scratch;
#pragma omp for schedule(dynamic)
        for (int task = 0; task < tasks; ++task) {
          const ForwardPart& part = *decoding[task / HKV];
          const Session& s = *part.session;
          const int g = task % HKV, t = at[&part - parts.data()];
          for (int i = 0; i < group; ++i)
            s.cache_.permute_query(l, g, &q[(size_t)t * q_dim + (size_t)(g * group + i) * D], &qg[(size_t)i * D]);
          float* out = &att[(size_t)t * q_dim + (size_t)g * group * D];
          try {
            if (sliding) {
              const int64_t from = std::max<int64_t>(0, s.n_past_ - c.sliding_window + 1);
              const KvHeadView kv = s.cache_.view(l, g, from, s.n_past_ + 1);
              // (a window is short: with fewer KV heads than threads, it is shared out too; decided by
              // the model, not the batch, so a sequence's result does not depend on its batch)
              split_grouped_attention(qg.data(), group, kv, nullptr, kv.n_tokens, scale, out,
                                      HKV < omp_get_num_threads() ? kMinRowsPerWindowSlice : kMinRowsPerSlice);
            } else {
              decode_group_attention(*s.policy_, l, g, s.n_past_, s.cache_, l, qg.data(), group, scale, out, scratch);
            }
          } catch (...) {
#pragma omp critical(fasa_decode_failure)
            if (!failure) failure = std::current_exception();
          }
        }
      }
      if (failure) std::rethrow_exception(failure);
    }
    for (size_t i = 0; i < parts.size(); ++i)
      if (!parts[i].decode)
        parts[i].session->prefill_attention(l, parts[i].session->n_past_, parts[i].n, &q[(size_t)at[i] * q_dim],
                                            &att[(size_t)at[i] * q_dim]);

    matmul(L.wo, att.data(), n, xb.data());
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; ++t) {
      float* o = &xb[(size_t)t * E];
      if (c.post_norms) rms_norm(o, L.post_attn_norm.data(), E, c.rms_eps, o);
      for (int i = 0; i < E; ++i) x[(size_t)t * E + i] += o[i];
      rms_norm(&x[(size_t)t * E], L.ffn_norm.data(), E, c.rms_eps, &xb[(size_t)t * E]);
    }
    if (c.n_expert > 0) {
      expert_ffn(c, L, xb.data(), n, a.experts);
      xb.swap(a.experts.out);
    } else {
      matmul(L.w_gate, xb.data(), n, gate.data());
      matmul(L.w_up, xb.data(), n, up.data());
#pragma omp parallel for schedule(static) if (n > 1)
      for (int t = 0; t < n; ++t)
        (c.gelu_ffn ? geglu : swiglu)(&gate[(size_t)t * F], &up[(size_t)t * F], F);
      matmul(L.w_down, gate.data(), n, xb.data());
    }
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; ++t) {
      float* o = &xb[(size_t)t * E];
      if (c.post_norms) rms_norm(o, L.post_ffn_norm.data(), E, c.rms_eps, o);
      for (int i = 0; i < E; ++i) x[(size_t)t * E + i] += o[i];
    }
  }
  for (const ForwardPart& part : parts) part.session->n_past_ += part.n;

  // Only the rows whose logits are wanted go through the (large) output projection, all in one matmul.
  std::vector<int> rows;  // [R] the wanted rows of the pass
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].logits)
      for (int t = parts[i].all_logits ? at[i] : at[i + 1] - 1; t < at[i + 1]; ++t) rows.push_back(t);
  if (rows.empty()) return;
  for (size_t r = 0; r < rows.size(); ++r)
    rms_norm(&x[(size_t)rows[r] * E], w.output_norm.data(), E, c.rms_eps, &xb[r * E]);
  const size_t V = (size_t)c.n_vocab;
  const auto wanting = std::count_if(parts.begin(), parts.end(), [](const ForwardPart& p) { return p.logits; });
  const bool one = wanting == 1;  // one part wants logits: they go straight to it
  std::vector<float> all(one ? 0 : rows.size() * V);  // [R, n_vocab] otherwise
  const auto target = std::find_if(parts.begin(), parts.end(), [](const ForwardPart& p) { return p.logits; });
  float* logits = one ? target->logits : all.data();  // [R, n_vocab]
  matmul(w.output, xb.data(), (int)rows.size(), logits);
  if (c.final_softcap > 0) {
    const int64_t n_logits = (int64_t)(rows.size() * V);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n_logits; ++i) logits[i] = c.final_softcap * std::tanh(logits[i] / c.final_softcap);
  }
  if (one) return;
  size_t r = 0;
  for (const ForwardPart& part : parts)
    if (part.logits) {
      const size_t m = part.all_logits ? (size_t)part.n : 1;
      std::copy_n(&all[r * V], m * V, part.logits);
      r += m;
    }
}

}  // namespace fasa
