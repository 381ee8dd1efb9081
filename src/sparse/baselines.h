#pragma once
// The baselines FASA is compared with (a row each in src/sparse/policies.inc), each a
// small SparsePolicy: they share the budget and dense-layer handling and differ only in which rows
// they pick.
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "sparse/policy.h"

namespace fasa {

// Exact top-N by full q.k, per head and step: the upper bound for any selection rule.
class OraclePolicy final : public SparsePolicy {
 public:
  using SparsePolicy::SparsePolicy;
  std::string_view name() const override;

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;
};

// StreamingLLM: the first `sink` tokens plus the most recent ones.
class StreamPolicy final : public SparsePolicy {
 public:
  static constexpr int kDefaultSink = 8;
  StreamPolicy(Budget b, const std::vector<int>& dense, int n_layer, int sink)
      : SparsePolicy(b, dense, n_layer), sink_(sink) {}
  std::string_view name() const override;

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;

 private:
  int sink_;
};
// Its sink count with these options: --sink, else the default.
inline int stream_sink(const PolicyOptions& o) { return o.sink >= 0 ? o.sink : StreamPolicy::kDefaultSink; }

// Uniformly random tokens, seeded by (seed, layer, head, position): reproducible.
class RandomPolicy final : public SparsePolicy {
 public:
  RandomPolicy(Budget b, const std::vector<int>& dense, int n_layer, uint64_t seed)
      : SparsePolicy(b, dense, n_layer), seed_(seed) {}
  std::string_view name() const override;

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;

 private:
  uint64_t seed_;
};

// Quest: 16-token pages; the newest token's page is always read, and the other pages, ranked by an
// upper bound of q.k from per-dim key min/max, are read whole in what remains of the budget.
class QuestPolicy final : public SparsePolicy {
 public:
  static constexpr int kPage = 16;
  QuestPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head_kv);
  std::string_view name() const override;
  void on_truncate(int64_t n_tokens) override;
  std::optional<DeviceSelection> device_selection(int n_layer) const override;

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;

 private:
  struct PageStats {
    std::mutex mu;
    int64_t pages = 0;        // complete pages summarised
    std::vector<float> lo;    // [pages, head_dim] per-dim key minimum
    std::vector<float> hi;    // [pages, head_dim] per-dim key maximum
  };
  int n_head_kv_;
  std::vector<std::unique_ptr<PageStats>> stats_;  // [n_layer * n_head_kv]
};

// SparQ: approximate scores on the r largest-|q| dims, top-N, then exact attention.
class SparqPolicy final : public SparsePolicy {
 public:
  SparqPolicy(Budget b, const std::vector<int>& dense, int n_layer, int r)
      : SparsePolicy(b, dense, n_layer), r_(r) {}
  std::string_view name() const override;

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;

 private:
  int r_;
};

// H2O: heavy hitters by accumulated attention plus recent tokens; evicted tokens never return.
class H2oPolicy final : public SparsePolicy {
 public:
  H2oPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head);
  std::string_view name() const override;
  void observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;
  void on_truncate(int64_t n_tokens) override;
  bool truncate_is_exact() const override { return false; }

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;
  void on_dense_step(const AttentionQuery& q, const KvHeadView& kv) override;

 private:
  struct HeadState {
    std::vector<double> acc;   // [n_tokens] accumulated attention
    std::vector<char> kept;    // [n_tokens] still in the cache
  };
  void accumulate(HeadState& s, const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n);
  int n_head_;
  std::vector<HeadState> heads_;  // [n_layer * n_head]
};

// SnapKV: the attention of an observation window of recent queries (max-pooled, kernel 7) picks the
// prompt tokens to keep; tokens after the selection are kept too; re-selects every `every` steps.
class SnapKvPolicy final : public SparsePolicy {
 public:
  SnapKvPolicy(Budget b, const std::vector<int>& dense, int n_layer, int n_head, int head_dim, int window, int every);
  std::string_view name() const override;
  void observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;
  void on_truncate(int64_t n_tokens) override;
  bool truncate_is_exact() const override { return false; }

 protected:
  void pick_head(const AttentionQuery& q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) override;
  void on_dense_step(const AttentionQuery& q, const KvHeadView& kv) override;

 private:
  struct HeadState {
    std::deque<std::pair<int64_t, std::vector<float>>> window;  // (position, query [head_dim])
    std::vector<int32_t> ranked;  // rows chosen at the last selection, best first
    int64_t selected_at = -1;     // n_tokens at the last selection
  };
  void remember(HeadState& s, int64_t pos, const float* q);
  void reselect(HeadState& s, const KvHeadView& kv);
  int n_head_, head_dim_, window_, every_;
  std::vector<HeadState> heads_;  // [n_layer * n_head]
};

}  // namespace fasa
