#include <algorithm>

#include "model/model.h"
#include "sparse/baselines.h"

namespace fasa {

std::string_view StreamPolicy::name() const { return "stream"; }

void StreamPolicy::pick_head(const AttentionQuery&, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) {
  const int64_t sink = std::min<int64_t>(sink_, budget);
  for (int64_t r = 0; r < sink; ++r) rows.push_back((int32_t)r);
  for (int64_t r = kv.n_tokens - (budget - sink); r < kv.n_tokens; ++r) rows.push_back((int32_t)r);
}

std::unique_ptr<AttentionPolicy> make_stream_policy(const PolicyOptions& o, const Model& m, AutoProfileStore*) {
  return std::make_unique<StreamPolicy>(o.budget, o.dense_layers, m.config.n_layer, stream_sink(o));
}

std::string stream_settings(const PolicyOptions& o, const Model&) { return "sink=" + std::to_string(stream_sink(o)); }

}  // namespace fasa
