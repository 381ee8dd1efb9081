#pragma once
// KV cache: for every layer and KV head, post-RoPE keys and values of each position.
//
// Keys are stored in two planes per (layer, KV head), split by a KeyLayout: K_dom holds the dims a
// selection policy scores on (FASA's dominant frequency chunks), contiguous per token, so scoring
// streams only those bytes; K_rest holds the other dims. The dims are stored permuted (dominant
// first), and queries are permuted the same way, so q.k is unchanged. Dense runs use the identity
// layout with an empty K_dom. Keys and values each are F16 (default, as llama.cpp's), F32 or Q8_0
// (KvTypes, fasa/options.h); with tip_int8, a Q8_0 copy of K_dom is kept for TIP to scan: scores only rank tokens,
// so ranking on int8 keys reads fewer bytes while attention still reads the K_dom plane itself.
//
// A sliding-window layer (Gemma's local layers) keeps only its last `ring` positions: position p at
// row p % ring and again at row p % ring + ring, so any ring positions in a row are contiguous rows
// (a view needs no wrap-around). Its heads have the identity key layout.
//
// FASA-M (KvOffloadOptions): the heads with a K_dom plane keep only it in fast memory; their K_rest
// and V rows go to a slower tier (KvOffload) and a decode step gathers the rows it selected.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_offload.h"
#include "ops/kv_view.h"

namespace fasa {

// The values KvCache::fill_random writes for one (layer, KV head): an xorshift64* stream of uniform
// values scaled to unit variance, each row's dims in order as (k, v) pairs. The GPU's fill draws the
// same stream, so a device and the CPU filled with one seed hold the same rows.
class FillStream {
 public:
  FillStream(uint64_t seed, int layer, int kv_head)
      : s_((seed + 1) * 0x9e3779b97f4a7c15ull ^ (((uint64_t)layer << 32) + (uint64_t)kv_head + 1)) {}
  float next() {
    s_ ^= s_ >> 12, s_ ^= s_ << 25, s_ ^= s_ >> 27;
    return ((float)((s_ * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 1.7320508f;
  }

 private:
  uint64_t s_;
};

// Which model dims of a head go to K_dom. perm[i] = model dim stored at cache dim i; the first
// n_dom cache dims form K_dom. Empty perm = identity with n_dom = 0.
struct KeyLayout {
  std::vector<int> perm;  // [head_dim] or empty
  int n_dom = 0;
  bool operator==(const KeyLayout&) const = default;
};

// An offloaded head's gathered rows: the planes behind the compact view gather() returns.
struct GatheredRows {
  std::vector<uint8_t> k_dom, k_rest, v;  // [n, n_dom], [n, head_dim - n_dom], [n, head_dim] rows
};

class KvCache {
 public:
  // `layouts`: [n_layer * n_head_kv] (layer-major) or empty for identity everywhere. With
  // `offload`, heads whose layout has a K_dom plane keep K_rest and V in the slow tier.
  // `ring`: [n_layer] or empty; ring[l] > 0 keeps only layer l's last ring[l] positions.
  // Throws fasa::Error when the cache would not fit in this machine's memory (or the fast limit), a
  // layout is invalid or a type is not a KV type.
  KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx, std::vector<KeyLayout> layouts = {},
          KvTypes types = {}, const KvOffloadOptions& offload = {}, const std::vector<int64_t>& ring = {});
  ~KvCache();

  // Stores the key (model dim order) and value of one position.   k, v: [head_dim]
  // With offloading, positions are stored in order from one thread (see fill_random for many).
  void store(int layer, int kv_head, int64_t pos, const float* k, const float* v);
  // Stores n positions from p0 of random keys and values (unit variance, like normed activations)
  // in every layer and KV head, seeded: a benchmark's stand-in for a prefill.
  void fill_random(int64_t p0, int64_t n, uint64_t seed);
  // Writes q (model dim order, [head_dim]) in this (layer, KV head)'s cache order into out, rounded
  // to F16 when the keys are F16 (as llama.cpp's F16 dot rounds it).
  void permute_query(int layer, int kv_head, const float* q, float* out) const;
  // Positions begin..end-1 (a ring layer: at most its ring, still held). Offloaded heads' views have
  // only the K_dom plane (k_rest and v are null): use gather().
  KvHeadView view(int layer, int kv_head, int64_t begin, int64_t end) const;
  KvHeadView view(int layer, int kv_head, int64_t n_tokens) const { return view(layer, kv_head, 0, n_tokens); }
  // The positions a ring layer keeps (0: all).
  int64_t ring(int layer) const { return heads_[index(layer, 0)].ring; }
  bool offloaded(int layer, int kv_head) const { return heads_[index(layer, kv_head)].slot >= 0; }
  // An offloaded head's rows (ascending) as a compact view whose row j is cache row rows[j].
  // `decode`: a decode step's selection (prefetched, remembered for the next step).
  KvHeadView gather(int layer, int kv_head, const int32_t* rows, int64_t n, bool decode, GatheredRows& out) const;
  // A decode step starts a layer's attention: the offload's prefetch of the next layer starts.
  void begin_decode_layer(int layer) {
    if (offload_) offload_->begin_layer(layer);
  }
  // Moves the first n_rows positions of every head into new key layouts (as the constructor's
  // `layouts`); Q8_0 keys are quantized again in their new blocks. Throws fasa::Error for an
  // offloaded cache, an invalid layout or one over --kv-fast-limit (nothing changed), or
  // std::bad_alloc (then the cache is unusable: heads are moved one at a time to keep memory low).
  void relayout(std::vector<KeyLayout> layouts, int64_t n_rows);
  // Positions >= n will be written again.
  void truncate(int64_t n) {
    if (offload_) offload_->truncate(n);
  }
  KvMemory memory() const;  // rss left 0
  const KeyLayout& layout(int layer, int kv_head) const { return heads_[index(layer, kv_head)].layout; }

  int64_t n_ctx() const { return n_ctx_; }
  int head_dim() const { return head_dim_; }
  int n_head_kv() const { return n_head_kv_; }
  int n_layer() const { return (int)(heads_.size() / n_head_kv_); }
  const KvTypes& types() const { return types_; }
  size_t bytes() const;  // of the planes in RAM
  // Bytes the attention kernels and the selection policies read through this cache's views so far
  // (ops/kv_traffic.h): each cache counts its own, so contexts running side by side do not mix.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  struct HeadPlanes {
    KeyLayout layout;
    std::vector<uint8_t> k_dom;   // [rows, n_dom] rows of types_.k
    std::vector<uint8_t> k_tip;   // [rows, n_dom] Q8_0 rows with types_.tip_int8, else empty
    std::vector<uint8_t> k_rest;  // [rows, head_dim - n_dom] of types_.k; empty when offloaded
    std::vector<uint8_t> v;       // [rows, head_dim] of types_.v; empty when offloaded
    int slot = -1;                // the head's index in offload_, or -1
    int64_t ring = 0;             // > 0: a ring of that many positions, each stored twice (above)
  };
  // A head's rows: n_ctx, or twice its ring.
  int64_t rows(const HeadPlanes& h) const { return h.ring ? 2 * h.ring : n_ctx_; }
  size_t index(int layer, int kv_head) const { return (size_t)layer * n_head_kv_ + kv_head; }
  // Sizes h's key planes for its layout (zeros; K_rest only when not offloaded).
  void allocate_keys(HeadPlanes& h) const;
  // Bytes of a resident head's key planes (K_dom, the int8 TIP copy, K_rest) per position.
  size_t key_row_bytes(const KeyLayout& l) const;
  // Stores a key in cache order into h's key planes at `row` (K_rest only when not offloaded).
  void store_key(HeadPlanes& h, int64_t row, const float* k_cache_order);
  int n_head_kv_, head_dim_;
  int64_t n_ctx_;
  KvTypes types_;
  size_t fast_limit_;              // --kv-fast-limit; 0: none
  std::vector<HeadPlanes> heads_;  // [n_layer * n_head_kv]
  std::unique_ptr<KvOffload> offload_;
  mutable std::atomic<uint64_t> bytes_read_{0};  // the views' reads (bytes_read())
};

}  // namespace fasa
