#pragma once
// What attention kernels and selection policies read of a KV cache: one (layer, KV head)'s planes.
// KvCache (kv/kv_cache.h) hands these out; the kernels below the cache know only this view.
#include <atomic>
#include <cstdint>

#include "ops/kv_rows.h"

namespace fasa {

// Keys and values of one (layer, KV head): rows 0..n_tokens-1 are the cached positions.
// A key row in cache order is [k_dom row | k_rest row]. Keys are of k_type, values of v_type (F32,
// F16 or Q8_0). k_tip, when set, is a Q8_0 copy of K_dom that TIP scans instead (scores only rank).
struct KvHeadView {
  const void* k_dom = nullptr;   // [n_tokens, n_dom]
  const void* k_rest = nullptr;  // [n_tokens, head_dim - n_dom]
  const void* v = nullptr;       // [n_tokens, head_dim]
  int64_t n_tokens = 0;
  int head_dim = 0;
  int n_dom = 0;
  DType k_type = DType::F32, v_type = DType::F32;
  const void* k_tip = nullptr;  // [n_tokens, n_dom] Q8_0, or null: TIP scans k_dom
  std::atomic<uint64_t>* bytes_read = nullptr;  // the cache's traffic counter (ops/kv_traffic.h), or null: uncounted

  const void* k_dom_row(int64_t r) const { return row(k_dom, r, k_type, n_dom); }
  const void* k_rest_row(int64_t r) const { return row(k_rest, r, k_type, head_dim - n_dom); }
  const void* v_row(int64_t r) const { return row(v, r, v_type, head_dim); }
  // The plane TIP scores on, and its type.
  const void* tip_plane() const { return k_tip ? k_tip : k_dom; }
  DType tip_type() const { return k_tip ? DType::Q8_0 : k_type; }
  // Rows r.. of this view as a view of their own (row 0 = row r).
  KvHeadView from_row(int64_t r) const {
    auto at = [r](const void* plane, DType t, int width) { return plane ? row(plane, r, t, width) : nullptr; };
    KvHeadView v = *this;
    v.k_dom = at(k_dom, k_type, n_dom);
    v.k_rest = at(k_rest, k_type, head_dim - n_dom);
    v.v = at(this->v, v_type, head_dim);
    v.k_tip = at(k_tip, DType::Q8_0, n_dom);
    v.n_tokens = n_tokens - r;
    return v;
  }
  // Element d (cache dim order) of key row r, and element d of value row r: the slow path.
  float key(int64_t r, int d) const {
    return d < n_dom ? kv_row_element(k_dom_row(r), k_type, d) : kv_row_element(k_rest_row(r), k_type, d - n_dom);
  }
  float value(int64_t r, int d) const { return kv_row_element(v_row(r), v_type, d); }
  // Bytes of one whole key row, of one value row.
  size_t key_row_bytes() const { return kv_row_bytes(k_type, n_dom) + kv_row_bytes(k_type, head_dim - n_dom); }
  size_t value_row_bytes() const { return kv_row_bytes(v_type, head_dim); }

 private:
  static const void* row(const void* plane, int64_t r, DType t, int width) {
    return static_cast<const uint8_t*>(plane) + (size_t)r * kv_row_bytes(t, width);
  }
};

}  // namespace fasa
