#pragma once
// Contextual agreement (docs/FASA.md §2) of single frequency chunks: for one query over keys k_0..k_p,
//   CA_K(i) = |TopK(q.k) ∩ TopK(q^[i].k^[i])| / K.
// Measured on dense runs through an AttentionObserver: every query at position p >= min_pos with
// more than K keys counts (keys = rows 0..p). (Compound CA of whole selection rules, FASA's included,
// is measured on the decode path by `fasa eval ca`.)
#include <cstdint>
#include <mutex>
#include <vector>

#include "calib/fc_layout.h"
#include "model/session.h"

namespace fasa {

class AgreementMeter : public AttentionObserver {
 public:
  // Per-FC mean CA at top_k for every (layer, query head, FC), over the queries at positions
  // min_pos, min_pos + stride, ... (stride > 1: a sample, for measuring during a real prefill).
  AgreementMeter(const ModelConfig& c, int top_k, int64_t min_pos, int stride = 1);

  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;

  // Mean CA [n_layer, n_head, n_fc] and the number of queries behind each (layer, head).
  std::vector<float> mean_fc_ca() const;
  int64_t fc_queries() const;
  // DoubleSparse's channel statistic [n_layer, n_head, head_dim]: mean |q_c| of the measured queries
  // times mean |k_c| of every key their KV head cached in the observed calls, per channel c.
  std::vector<float> channel_qk() const;

 private:
  int n_head_, n_head_kv_, head_dim_;
  FcLayout fcs_;
  int top_k_;
  int64_t min_pos_;
  int stride_;
  std::mutex mu_;
  std::vector<double> fc_sum_;     // [n_layer, n_head, n_fc]
  std::vector<int64_t> fc_count_;  // [n_layer, n_head]
  void add_key_magnitudes(int layer, int64_t p0, int n, const KvCache& cache);  // rows p0..p0+n-1
  std::vector<double> q_abs_sum_;  // [n_layer, n_head, head_dim], over fc_count_ queries
  std::vector<double> k_abs_sum_;  // [n_layer, n_head_kv, head_dim], over k_count_ rows
  std::vector<int64_t> k_count_;   // [n_layer]
};

// Keys rows 0..n_rows-1 of every KV head of `layer`, each chunk's first and second dim apart, so that a
// chunk's partial scores are two contiguous multiply-adds: first, second [n_head_kv, n_fc, n_rows].
void unpack_chunk_keys(const KvCache& cache, int layer, int64_t n_rows, const FcLayout& fcs, std::vector<float>& first,
                       std::vector<float>& second);

// One query head's partial score on every chunk over rows 0..T-1 of one KV head's unpacked keys (first,
// second: that head's [n_fc, n_rows] planes), and their sum, the full q.k: partial [n_fc, T], full [T].
void chunk_scores(const float* q, const FcLayout& fcs, const float* first, const float* second, int64_t n_rows,
                  int64_t T, std::vector<float>& partial, std::vector<float>& full);

// Token windows of a long text for dense runs: the first `n_ctx` tokens, then each next slice with
// BOS prepended (when the model has one), as perplexity tools do.
std::vector<std::vector<int32_t>> token_windows(const std::vector<int32_t>& tokens, int64_t n_ctx, int32_t bos);

}  // namespace fasa
