#pragma once
// KV cache: for every layer and KV head, post-RoPE keys and values of each position.
//
// Keys are stored in two planes per (layer, KV head), split by a KeyLayout: K_dom holds the dims a
// selection policy scores on (FASA's dominant frequency chunks), contiguous per token, so scoring
// streams only those bytes; K_rest holds the other dims. The dims are stored permuted (dominant
// first), and queries are permuted the same way, so q.k is unchanged. Dense runs use the identity
// layout with an empty K_dom.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fasa {

// Which model dims of a head go to K_dom. perm[i] = model dim stored at cache dim i; the first
// n_dom cache dims form K_dom. Empty perm = identity with n_dom = 0.
struct KeyLayout {
  std::vector<int> perm;  // [head_dim] or empty
  int n_dom = 0;
};

// Keys and values of one (layer, KV head): rows 0..n_tokens-1 are the cached positions.
// A key row in cache order is [k_dom row | k_rest row].
struct KvHeadView {
  const float* k_dom = nullptr;   // [n_tokens, n_dom]
  const float* k_rest = nullptr;  // [n_tokens, head_dim - n_dom]
  const float* v = nullptr;       // [n_tokens, head_dim]
  int64_t n_tokens = 0;
  int head_dim = 0;
  int n_dom = 0;
};

class KvCache {
 public:
  // `layouts`: [n_layer * n_head_kv] (layer-major) or empty for identity everywhere.
  // Throws fasa::Error when the cache would not fit in this machine's memory or a layout is invalid.
  KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx, std::vector<KeyLayout> layouts = {});

  // Stores the key (model dim order) and value of one position.   k, v: [head_dim]
  void store(int layer, int kv_head, int64_t pos, const float* k, const float* v);
  // Writes q (model dim order, [head_dim]) in this (layer, KV head)'s cache order into out.
  void permute_query(int layer, int kv_head, const float* q, float* out) const;
  KvHeadView view(int layer, int kv_head, int64_t n_tokens) const;
  const KeyLayout& layout(int layer, int kv_head) const { return heads_[index(layer, kv_head)].layout; }

  int64_t n_ctx() const { return n_ctx_; }
  int head_dim() const { return head_dim_; }
  int n_head_kv() const { return n_head_kv_; }
  size_t bytes() const;

 private:
  struct HeadPlanes {
    KeyLayout layout;
    std::vector<float> k_dom;   // [n_ctx, n_dom]
    std::vector<float> k_rest;  // [n_ctx, head_dim - n_dom]
    std::vector<float> v;       // [n_ctx, head_dim]
  };
  size_t index(int layer, int kv_head) const { return (size_t)layer * n_head_kv_ + kv_head; }
  int n_head_kv_, head_dim_;
  int64_t n_ctx_;
  std::vector<HeadPlanes> heads_;  // [n_layer * n_head_kv]
};

// Bytes of memory available for new allocations (MemAvailable; 0 when unknown).
size_t available_memory_bytes();

}  // namespace fasa
