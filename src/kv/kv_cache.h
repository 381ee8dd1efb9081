#pragma once
// Dense KV cache: for every layer and KV head, post-RoPE keys and values of each position.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fasa {

// Keys and values of one (layer, KV head): rows 0..n_tokens-1 are the cached positions.
struct KvHeadView {
  const float* k = nullptr;  // [n_tokens, head_dim]
  const float* v = nullptr;  // [n_tokens, head_dim]
  int64_t n_tokens = 0;
  int head_dim = 0;
};

class KvCache {
 public:
  // Throws fasa::Error when the cache would not fit in this machine's memory.
  KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx);

  float* k_row(int layer, int kv_head, int64_t pos) { return k_.data() + offset(layer, kv_head, pos); }
  float* v_row(int layer, int kv_head, int64_t pos) { return v_.data() + offset(layer, kv_head, pos); }
  KvHeadView view(int layer, int kv_head, int64_t n_tokens) const {
    return {k_.data() + offset(layer, kv_head, 0), v_.data() + offset(layer, kv_head, 0), n_tokens, head_dim_};
  }
  int64_t n_ctx() const { return n_ctx_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t offset(int layer, int kv_head, int64_t pos) const {
    return (((size_t)layer * n_head_kv_ + kv_head) * n_ctx_ + pos) * head_dim_;
  }
  int n_head_kv_, head_dim_;
  int64_t n_ctx_;
  std::vector<float> k_;  // [n_layer, n_head_kv, n_ctx, head_dim]
  std::vector<float> v_;  // [n_layer, n_head_kv, n_ctx, head_dim]
};

// Bytes of physical memory on this machine (0 when unknown).
size_t physical_memory_bytes();

}  // namespace fasa
