#pragma once
// Contextual agreement (FASA-SPEC §2): for one query over keys k_0..k_p,
//   CA_K(set) = |TopK(q.k) ∩ TopK(score_set)| / K,
// where score_set sums the partial q.k of the chunks in the set (one chunk: a per-FC CA; several:
// compound CA, exactly FASA's TIP score). Measured on dense runs through an AttentionObserver:
// every query at position p >= min_pos with more than K keys counts (keys = rows 0..p).
#include <cstdint>
#include <mutex>
#include <vector>

#include "calib/fc_layout.h"
#include "model/session.h"

namespace fasa {

class AgreementMeter : public AttentionObserver {
 public:
  // Per-FC mean CA at top_k for every (layer, query head, FC).
  static AgreementMeter per_fc(const ModelConfig& c, int top_k, int64_t min_pos);
  // Compound CA of FC sets at several K. sets[s][layer * n_head + head] = that head's chunks.
  static AgreementMeter compound(const ModelConfig& c, std::vector<std::vector<std::vector<int>>> sets,
                                 std::vector<int> top_ks, int64_t min_pos);

  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;

  // Per-FC mode: mean CA [n_layer, n_head, n_fc] and the number of queries behind each (layer, head).
  std::vector<float> mean_fc_ca() const;
  int64_t fc_queries() const;
  // Compound mode: mean CA over all counted queries, heads and layers, for set s at top_ks[k].
  double compound_ca(size_t s, size_t k) const;
  int64_t compound_queries(size_t k) const;

  AgreementMeter(AgreementMeter&&) = default;

 private:
  AgreementMeter(const ModelConfig& c, int64_t min_pos);
  int n_layer_, n_head_, n_head_kv_, head_dim_;
  FcLayout fcs_;
  int64_t min_pos_;
  bool per_fc_ = false;
  std::vector<int> top_ks_;
  std::vector<std::vector<std::vector<int>>> sets_;
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  std::vector<double> fc_sum_;         // [n_layer, n_head, n_fc]
  std::vector<int64_t> fc_count_;      // [n_layer, n_head]
  std::vector<double> set_sum_;        // [n_sets, n_k]
  std::vector<int64_t> set_count_;     // [n_k] (query, head, layer) triples counted
};

// Token windows of a long text for dense runs: the first `n_ctx` tokens, then each next slice with
// BOS prepended (when the model has one), as perplexity tools do.
std::vector<std::vector<int32_t>> token_windows(const std::vector<int32_t>& tokens, int64_t n_ctx, int32_t bos);

}  // namespace fasa
