#pragma once
// The token-selection seam. Each decode step, for every layer and query head, a policy picks the
// cache rows that head attends to (or "all"); gathered_attention then runs exact attention over just
// those rows. FASA and every baseline are policies; the model code never changes for them.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fasa/options.h"
#include "kv/kv_cache.h"

namespace fasa {

// A policy's selection as plain data, for a device that runs the whole decode step (model/device.h):
// per layer dense, or sparse: FASA's — TIP on the K_dom plane, the top rows within the budget (sink
// and recent rows forced inside it) — or Quest's — the pages with the best bounds —, then exact
// attention over the chosen rows.
struct DeviceSelection {
  enum class Kind { Fasa, Quest } kind = Kind::Fasa;
  std::vector<char> dense;               // [n_layer] layers that attend to every row
  std::vector<KeyLayout> layouts;        // [n_layer * n_head_kv] the K_dom plane: model dims perm[0..n_dom)
  std::vector<std::vector<int>> scored;  // [n_layer * n_head] the plane's slots each query head scores on
  Budget budget;
  int sink = 0, recent = 0;  // FASA's (forced_rows)
  int page = 16;             // Quest's page of positions
  // FASA-M: the sparse layers' K and V in host memory, the device reading only the chosen rows from
  // there; the K_dom planes and the dense layers stay in the device's memory. (Set by the session.)
  bool host_kv = false;
};

// FASA's forced rows at a step whose budget is `budget` rows (below the cache's): the first `sink` and
// the last `recent` tokens, together at most half the budget, so that TIP always chooses at least half
// (a small budget is not all sink and window). The device's shaders apply the same rule (step.glsl).
struct ForcedRows {
  int64_t sink, recent;
};
inline ForcedRows forced_rows(int64_t sink, int64_t recent, int64_t budget) {
  const int64_t half = budget / 2, s = std::min(sink, half);
  return {s, std::min(recent, half - s)};
}

// What a policy sees for one (layer, query head) at one decode step.
struct AttentionQuery {
  int layer = 0;
  int q_head = 0;
  int kv_head = 0;        // the KV head this query head reads (GQA)
  int64_t pos = 0;        // position of the token being decoded (its own row is kv.n_tokens - 1)
  const float* q = nullptr;  // [head_dim] post-RoPE query, in the cache's dim order (see KeyLayout)
};

class AttentionPolicy {
 public:
  virtual ~AttentionPolicy() = default;
  virtual std::string_view name() const = 0;
  // One line for logs and run headers; policies with a setting worth seeing (FASA) add it.
  virtual std::string summary() const { return std::string(name()); }
  // The rows each of the n_q query heads sharing one KV head reads (a decode step asks a group at a
  // time, so a policy may score the cache once for all of them, as FASA's TIP): sparse[i] = false to
  // attend to every row of `kv`; else sparse[i] = true and rows[i] = distinct row indices
  // < kv.n_tokens (any order). rows[i] arrive empty. Called concurrently for different KV heads.
  virtual void select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
                      bool* sparse) = 0;
  // The key layout this policy wants for (layer, KV head): which dims form the K_dom plane it scores
  // on. Asked once, when a session builds its cache. Default: identity, no K_dom.
  virtual KeyLayout key_layout(int /*layer*/, int /*kv_head*/) const { return {}; }
  // Prefill queries of a layer (model dim order, [n, n_head * head_dim]) after its keys were cached,
  // for policies that select from what the prompt attended to (SnapKV). Default: ignored.
  virtual void observe_prefill(int /*layer*/, int64_t /*p0*/, int /*n*/, const float* /*q*/, const KvCache&) {}
  // The session forgot rows >= n_tokens (truncate, reset); they will be written again, with other keys.
  // Policies that keep per-row state drop that of those rows. Never concurrent with a selection.
  virtual void on_truncate(int64_t /*n_tokens*/) {}
  // Whether, after on_truncate(n), the policy is as a fresh context that was fed the same n tokens
  // (false where its state keeps votes of forgotten queries: H2O, SnapKV). A server's prompt cache
  // reuses a prefix only where it is.
  virtual bool truncate_is_exact() const { return true; }
  // The selection as a device runs it, for a model of n_layer layers; none (the default) where the
  // policy runs on the CPU only.
  virtual std::optional<DeviceSelection> device_selection(int /*n_layer*/) const { return std::nullopt; }
};

// select() for one query head: whether it is sparse, its rows in `rows` (cleared first).
bool select_one(AttentionPolicy& policy, const AttentionQuery& query, const KvHeadView& kv, std::vector<int32_t>& rows);

// `full`: dense attention over the whole cache.
class FullAttention final : public AttentionPolicy {
 public:
  std::string_view name() const override { return kDenseAttn; }
  void select(const AttentionQuery*, int n_q, const KvHeadView&, std::vector<int32_t>*, bool* sparse) override {
    std::fill(sparse, sparse + n_q, false);
  }
  std::optional<DeviceSelection> device_selection(int n_layer) const override {
    DeviceSelection s;
    s.dense.assign(n_layer, 1);
    return s;
  }
};

}  // namespace fasa
