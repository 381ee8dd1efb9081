#include "sparse/doublesparse.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "fasa/error.h"
#include "model/model.h"
#include "sparse/fasa.h"

namespace fasa {

DoubleSparsePolicy::DoubleSparsePolicy(const Profile& profile, const ModelConfig& c, Budget budget,
                                           const std::vector<int>& dense_layers, int channels)
    : SparsePolicy(budget, dense_layers, c.n_layer), n_head_kv_(c.n_head_kv), channels_(channels),
      share_((double)channels / c.head_dim) {
  if (channels < 1 || channels > c.head_dim)
    throw Error("ds_channels: " + std::to_string(channels) + " must lie in 1.." + std::to_string(c.head_dim));
  if (profile.channel_qk.empty())
    throw Error("attn 'doublesparse': the profile has no channel statistics (made before DoubleSparse): make it again "
                "with `fasa calibrate`");
  const int D = c.head_dim, group = c.n_head / c.n_head_kv;
  for (int l = 0; l < c.n_layer; ++l)
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
      KeyLayout layout;
      if (!is_dense_layer(l) && !c.sliding(l)) {
        std::vector<double> weight(D, 0.0);  // the group's statistic per channel
        for (int h = kvh * group; h < (kvh + 1) * group; ++h)
          for (int d = 0; d < D; ++d) weight[d] += profile.channel_qk[((size_t)l * c.n_head + h) * D + d];
        layout.perm.resize(D);
        std::iota(layout.perm.begin(), layout.perm.end(), 0);
        std::stable_sort(layout.perm.begin(), layout.perm.end(), [&](int a, int b) { return weight[a] > weight[b]; });
        std::sort(layout.perm.begin(), layout.perm.begin() + channels);  // heavy channels, then the rest, in order
        std::sort(layout.perm.begin() + channels, layout.perm.end());
        layout.n_dom = channels;
      }
      layouts_.push_back(std::move(layout));
    }
}

std::string DoubleSparsePolicy::summary() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, ", scored on %d channels (%.1f%% of key dims)", channels_, 100 * share_);
  return SparsePolicy::summary() + buf;
}

void DoubleSparsePolicy::pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                              std::vector<int32_t>* rows) {
  const int nd = kv.n_dom;  // the query is in the cache's dim order: its first nd dims are the channels
  thread_local std::vector<float> q_dom;  // [n_q, nd]
  q_dom.resize((size_t)n_q * nd);
  for (int i = 0; i < n_q; ++i) std::copy(queries[i].q, queries[i].q + nd, &q_dom[(size_t)i * nd]);
  tip_top_rows(q_dom.data(), n_q, kv, 0, kv.n_tokens, budget, rows);
}

int doublesparse_channels(const PolicyOptions& o, const ModelConfig& c) {
  return o.ds_channels > 0 ? o.ds_channels : 2 * default_n_tip(c);
}

std::unique_ptr<AttentionPolicy> make_doublesparse_policy(const PolicyOptions& o, const Model& model, AutoProfileStore* autos) {
  return std::make_unique<DoubleSparsePolicy>(policy_profile(o, model, autos), model.config, o.budget, o.dense_layers,
                                                doublesparse_channels(o, model.config));
}

std::string doublesparse_settings(const PolicyOptions& o, const Model& model) {
  return "channels=" + std::to_string(doublesparse_channels(o, model.config));
}

}  // namespace fasa
