#pragma once
// DoubleSparse (Yang et al., 2024, "Post-Training Sparse Attention with Double Sparsity"), FASA's
// closest published cousin: offline calibration finds each head's heavy channels — here, per KV head,
// the r channels of largest mean |q_c| * mean |k_c| summed over the query heads that share it (the
// profile's channel statistic) — whose keys form a label cache; each step scores every token on those
// channels and attends exactly to the top ones. The label cache is the K_dom plane FASA reads (same
// byte count, same int8 option); the differences from FASA are single channels instead of RoPE chunks,
// and channels ranked by magnitude instead of by agreement with full attention's top tokens.
#include <vector>

#include "calib/profile.h"
#include "sparse/policy.h"

namespace fasa {

class DoubleSparsePolicy final : public SparsePolicy {
 public:
  // channels: r per KV head (<= head_dim); the profile must hold channel statistics.
  DoubleSparsePolicy(const Profile& profile, const ModelConfig& config, Budget budget,
                       const std::vector<int>& dense_layers, int channels);
  std::string_view name() const override { return "doublesparse"; }
  std::string summary() const override;
  // One pass over the label cache scores every query head of the group.
  void pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
            std::vector<int32_t>* rows) override;

 protected:
  KeyLayout sparse_key_layout(int layer, int kv_head) const override {
    return layouts_[(size_t)layer * n_head_kv_ + kv_head];
  }

 private:
  int n_head_kv_, channels_;
  double share_;                   // channels / head_dim
  std::vector<KeyLayout> layouts_;  // [n_layer * n_head_kv]: the heavy channels first
};

// Channels per KV head with these options: ds_channels, else as many dims as FASA's default chunks hold.
int doublesparse_channels(const PolicyOptions& opts, const ModelConfig& config);

}  // namespace fasa
