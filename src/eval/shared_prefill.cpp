#include "eval/shared_prefill.h"

#include "eval/policy_runs.h"
#include "sparse/policy.h"

namespace fasa {

namespace {

// Records every layer's prefill queries of a dense run.   queries[l]: [n_tokens, n_head * head_dim]
class QueryRecorder : public AttentionObserver {
 public:
  QueryRecorder(int n_layer, size_t row) : queries(n_layer), row_(row) {}
  void on_queries(int layer, int64_t, int n, const float* q, const KvCache&) override {
    queries[layer].insert(queries[layer].end(), q, q + (size_t)n * row_);
  }
  std::vector<std::vector<float>> queries;

 private:
  size_t row_;  // n_head * head_dim
};

}  // namespace

SharedPrefill prefill_for_policies(const Model& m, std::vector<int32_t> prompt, int max_new) {
  SharedPrefill p;
  p.prompt = std::move(prompt);
  p.max_new = max_new;
  SessionOptions so;
  so.n_ctx = (int64_t)p.prompt.size() + max_new;
  p.dense = std::make_unique<Session>(m, so);
  QueryRecorder rec(m.config.n_layer, (size_t)m.config.n_head * m.config.head_dim);
  p.dense->set_observer(&rec);
  p.dense->prefill(p.prompt);
  p.dense->set_observer(nullptr);
  p.queries = std::move(rec.queries);
  return p;
}

std::unique_ptr<Session> start_from(const Model& m, std::shared_ptr<AttentionPolicy> policy, const PolicyOptions& po,
                                    const SharedPrefill& pre) {
  auto s = std::make_unique<Session>(m, session_options(po, pre.dense->n_ctx()), std::move(policy));
  s->start_from_prefill(*pre.dense, pre.queries);
  return s;
}

}  // namespace fasa
