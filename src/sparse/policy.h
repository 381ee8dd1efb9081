#pragma once
// The token-selection seam. Each decode step, for every layer and query head, a policy picks the
// cache rows that head attends to (or "all"); gathered_attention then runs exact attention over just
// those rows. FASA and every baseline are policies; the model code never changes for them.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fasa/options.h"
#include "kv/kv_cache.h"
#include "sparse/budget.h"

namespace fasa {

// What a policy sees for one (layer, query head) at one decode step.
struct AttentionQuery {
  int layer = 0;
  int q_head = 0;
  int kv_head = 0;        // the KV head this query head reads (GQA)
  int64_t pos = 0;        // position of the token being decoded (its own row is kv.n_tokens - 1)
  const float* q = nullptr;  // [head_dim] post-RoPE query, in the cache's dim order (see KeyLayout)
};

class TokenSelector {
 public:
  virtual ~TokenSelector() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  // Return false to attend to every row of `kv`; otherwise fill `rows` with distinct row indices
  // < kv.n_tokens (any order) and return true. Called concurrently for different heads of one layer.
  virtual bool select(const AttentionQuery& query, const KvHeadView& kv, std::vector<int32_t>& rows) = 0;
  // select() for the n_q query heads sharing one KV head (queries[i], rows[i], sparse[i] = its
  // result), which is how a decode step asks. Default: select() per head; policies that can score
  // the cache once for the whole group (FASA's TIP) override it.
  virtual void select_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv,
                            std::vector<int32_t>* rows, bool* sparse);
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
};

// Base of every sparse policy: layers listed as dense, and steps where the budget covers the whole
// cache, attend to everything; otherwise pick() chooses exactly `budget` rows.
class SparseSelector : public TokenSelector {
 public:
  SparseSelector(Budget budget, const std::vector<int>& dense_layers, int n_layer);
  bool select(const AttentionQuery& query, const KvHeadView& kv, std::vector<int32_t>& rows) final;
  void select_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
                    bool* sparse) final;
  KeyLayout key_layout(int layer, int kv_head) const final;
  // pick_group() itself (rows cleared first), without select_group()'s dense shortcut when the
  // budget covers the context, so budget may equal kv.n_tokens: lets tests check that a policy's own
  // pick of every row gives dense attention.
  void pick_rows(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget, std::vector<int32_t>* rows);

 protected:
  // Fill `rows` with at most `budget` (<= kv.n_tokens; < from select) distinct rows.
  virtual void pick(const AttentionQuery& query, const KvHeadView& kv, int64_t budget, std::vector<int32_t>& rows) = 0;
  // pick() for the query heads sharing one KV head. Default: pick() per head.
  virtual void pick_group(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                          std::vector<int32_t>* rows);
  // A sparse layer's step that attends to everything (budget >= context); for stateful policies.
  virtual void on_dense_step(const AttentionQuery& /*query*/, const KvHeadView& /*kv*/) {}
  virtual KeyLayout sparse_key_layout(int /*layer*/, int /*kv_head*/) const { return {}; }
  bool is_dense_layer(int layer) const { return dense_[layer] != 0; }
  Budget budget_;

 private:
  std::vector<char> dense_;  // [n_layer]
};

// `full`: dense attention over the whole cache.
class FullAttention final : public TokenSelector {
 public:
  std::string_view name() const override { return "full"; }
  std::string_view description() const override { return "dense attention over every cached token"; }
  bool select(const AttentionQuery&, const KvHeadView&, std::vector<int32_t>&) override { return false; }
};

struct Model;


// Policy by name; throws fasa::Error listing the known names, or on a bad option/profile.
std::unique_ptr<TokenSelector> make_selector(const PolicyOptions& opts, const Model& model);
std::vector<std::string> selector_names();
// The frequency chunks per head FASA scores on with these options: --fcs, else the profile's, else
// (synthetic profile) calibration's default; 0 for other policies. For the records of a run.
int fasa_chunks(const PolicyOptions& opts, const Model& model);
std::vector<int> parse_layer_list(const std::string& s);

}  // namespace fasa
