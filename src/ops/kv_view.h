#pragma once
// What attention kernels and selection policies read of a KV cache: one (layer, KV head)'s planes.
// KvCache (kv/kv_cache.h) hands these out; the kernels below the cache know only this view.
#include <cstdint>

#include "ops/kv_rows.h"

namespace fasa {

// Keys and values of one (layer, KV head): rows 0..n_tokens-1 are the cached positions.
// A key row in cache order is [k_dom row | k_rest row]. Elements are of `type` (F32 or F16).
struct KvHeadView {
  const void* k_dom = nullptr;   // [n_tokens, n_dom]
  const void* k_rest = nullptr;  // [n_tokens, head_dim - n_dom]
  const void* v = nullptr;       // [n_tokens, head_dim]
  int64_t n_tokens = 0;
  int head_dim = 0;
  int n_dom = 0;
  DType type = DType::F32;

  const void* k_dom_row(int64_t r) const { return row(k_dom, r, n_dom); }
  const void* k_rest_row(int64_t r) const { return row(k_rest, r, head_dim - n_dom); }
  const void* v_row(int64_t r) const { return row(v, r, head_dim); }
  // Element d (cache dim order) of key row r, and element d of value row r: the slow path.
  float key(int64_t r, int d) const {
    return d < n_dom ? kv_element(k_dom, type, r * n_dom + d) : kv_element(k_rest, type, r * (head_dim - n_dom) + d - n_dom);
  }
  float value(int64_t r, int d) const { return kv_element(v, type, r * head_dim + d); }

 private:
  const void* row(const void* plane, int64_t r, int width) const {
    return static_cast<const uint8_t*>(plane) + (size_t)r * width * kv_elem_bytes(type);
  }
};

}  // namespace fasa
