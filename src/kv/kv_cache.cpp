#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <cstdio>
#include <numeric>
#include <string>

#include "fasa/error.h"
#include "util/memory.h"

namespace fasa {

namespace {
std::string gib(double bytes) {
  char b[64];
  std::snprintf(b, sizeof b, "%.0f bytes (%.2f GiB)", bytes, bytes / 1073741824.0);
  return b;
}

// `l` with the identity for an empty perm; throws unless it is a permutation of the head's dims.
KeyLayout checked_layout(KeyLayout l, int head_dim) {
  if (l.perm.empty()) {
    l.perm.resize(head_dim);
    std::iota(l.perm.begin(), l.perm.end(), 0);
    l.n_dom = 0;
  }
  std::vector<int> sorted = l.perm;
  std::sort(sorted.begin(), sorted.end());
  for (int d = 0; d < head_dim; ++d)
    if ((int)sorted.size() != head_dim || sorted[d] != d) throw Error("KV cache: key layout is not a permutation");
  if (l.n_dom < 0 || l.n_dom > head_dim) throw Error("KV cache: key layout n_dom out of range");
  return l;
}

// Throws unless the cache's shape and types are valid: n_ctx, the KV types, and the sizes of the
// constructor's `layouts` (0 or one per head) and `ring` (0 or one per layer).
void check_shape(int n_layer, size_t n_heads, int64_t n_ctx, KvTypes types, size_t n_layouts, size_t n_rings) {
  if (n_ctx <= 0) throw Error("context size must be positive, got " + std::to_string(n_ctx));
  for (DType t : {types.k, types.v})
    if (!is_kv_type(t)) {
      std::string names;  // kKvTypes'
      for (const KvTypeName& k : kKvTypes) names += (names.empty() ? "" : ", ") + std::string(k.name);
      throw Error(std::string("KV cache: no ") + dtype_name(t) + " cache (use " + names + ")");
    }
  if (n_layouts != 0 && n_layouts != n_heads)
    throw Error("KV cache: " + std::to_string(n_layouts) + " key layouts for " + std::to_string(n_heads) + " heads");
  if (n_rings != 0 && (int)n_rings != n_layer) throw Error("KV cache: ring sizes do not match the layers");
}

// The fast memory a cache needs, given `fast` bytes of planes in it and `slow` bytes per position
// in the slow tier; throws when the whole cache would not fit the machine's memory, or the fast
// part --kv-fast-limit.
double checked_fast_bytes(int64_t n_ctx, double fast, double slow, const KvOffloadOptions& offload) {
  const bool offloading = offload.offloaded();
  // With offloading, also the RAM chunk appends go to and the file tier's page map.
  const double offload_fast =
      (double)KvOffload::chunk_rows(n_ctx) * slow +
      (offload.tier == KvOffloadOptions::Tier::File ? (double)page_map_bytes((size_t)(slow * (double)n_ctx)) : 0);
  const double need_fast = fast + (offloading ? offload_fast : 0);
  const double need = need_fast + (offload.tier == KvOffloadOptions::Tier::Ram ? slow * (double)n_ctx : 0);
  const size_t have = available_memory_bytes();
  if (over_available(need, have))
    throw Error("the KV cache for " + std::to_string(n_ctx) + " tokens needs " + gib(need) + " but only " +
                gib((double)have) + " of memory are available (use a smaller context" +
                (offloading ? std::string(")") : ", or kv_offload 'file:DIR' with a policy that keeps a K_dom plane)"));
  if (offload.fast_limit && need_fast > (double)offload.fast_limit)
    throw Error("kv_fast_limit: the KV cache for " + std::to_string(n_ctx) + " tokens needs " + gib(need_fast) +
                " of fast memory, over the limit of " + gib((double)offload.fast_limit) +
                (offloading ? " (fewer fcs or a smaller context)"
                            : " (kv_offload 'ram' or 'file:DIR' keeps only K_dom in fast memory, with a policy that scores on one)"));
  return need_fast;
}
}  // namespace

KvCache::KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx, std::vector<KeyLayout> layouts, KvTypes types,
                 const KvOffloadOptions& offload, const std::vector<int64_t>& ring)
    : n_head_kv_(n_head_kv), head_dim_(head_dim), n_ctx_(n_ctx), types_(types), fast_limit_(offload.fast_limit) {
  types_.tip_int8 = types.tip_int8 && types.k != DType::Q8_0;  // Q8_0 keys: TIP scans K_dom itself
  const size_t n_heads = (size_t)n_layer * n_head_kv;
  check_shape(n_layer, n_heads, n_ctx, types, layouts.size(), ring.size());
  const bool offloading = offload.offloaded();
  heads_.resize(n_heads);
  std::vector<size_t> record_bytes;  // [offloaded heads] one K_rest + V row
  std::vector<int> head_layer;       // [offloaded heads]
  double fast = 0, slow = 0;         // bytes in fast memory; bytes per position in the slow tier
  for (size_t i = 0; i < n_heads; ++i) {
    HeadPlanes& h = heads_[i];
    h.layout = checked_layout(layouts.empty() ? KeyLayout{} : std::move(layouts[i]), head_dim);
    const int nd = h.layout.n_dom;
    h.ring = ring.empty() || ring[i / n_head_kv] >= n_ctx ? 0 : ring[i / n_head_kv];
    if (h.ring < 0 || (h.ring > 0 && nd > 0)) throw Error("KV cache: a ring layer needs the identity key layout");
    const double n_rows = (double)rows(h);
    const size_t k_rest = kv_row_bytes(types.k, head_dim - nd), rest = k_rest + kv_row_bytes(types.v, head_dim);
    fast += (double)(key_row_bytes(h.layout) - k_rest) * n_rows;  // K_dom and its int8 TIP copy
    if (offloading && nd > 0) {
      h.slot = (int)record_bytes.size();
      record_bytes.push_back(rest);
      head_layer.push_back((int)(i / n_head_kv));
      slow += (double)rest;
    } else {
      fast += (double)rest * n_rows;
    }
  }
  if (offloading && record_bytes.empty())
    throw Error("kv_offload: no head has a K_dom plane to keep in fast memory (the policy keeps none)");
  const double need_fast = checked_fast_bytes(n_ctx, fast, slow, offload);
  for (HeadPlanes& h : heads_) {
    allocate_keys(h);
    if (h.slot < 0) h.v.assign((size_t)rows(h) * kv_row_bytes(types_.v, head_dim), 0);
  }
  if (offloading) {
    constexpr size_t kDefaultPrefetchCap = 64u << 20;
    const size_t cap = offload.fast_limit ? offload.fast_limit - (size_t)need_fast : kDefaultPrefetchCap;
    offload_ = std::make_unique<KvOffload>(offload, n_ctx, std::move(record_bytes), std::move(head_layer), cap);
  }
}

KvCache::~KvCache() = default;

size_t KvCache::key_row_bytes(const KeyLayout& l) const {
  return kv_row_bytes(types_.k, l.n_dom) + (types_.tip_int8 ? kv_row_bytes(DType::Q8_0, l.n_dom) : 0) +
         kv_row_bytes(types_.k, head_dim_ - l.n_dom);
}

void KvCache::allocate_keys(HeadPlanes& h) const {
  const int nd = h.layout.n_dom;
  const size_t n = (size_t)rows(h);
  h.k_dom.assign(n * kv_row_bytes(types_.k, nd), 0);
  h.k_tip.assign(types_.tip_int8 ? n * kv_row_bytes(DType::Q8_0, nd) : 0, 0);
  if (h.slot < 0) h.k_rest.assign(n * kv_row_bytes(types_.k, head_dim_ - nd), 0);
}

void KvCache::relayout(std::vector<KeyLayout> layouts, int64_t n_rows) {
  if (offload_) throw Error("KV cache: an offloaded cache cannot change its key layout");
  if (layouts.size() != heads_.size() || n_rows < 0 || n_rows > n_ctx_)
    throw Error("KV cache: relayout does not match the cache");
  double fast = (double)bytes();  // after the relayout: the int8 TIP copy grows with K_dom
  for (size_t i = 0; i < heads_.size(); ++i) {
    layouts[i] = checked_layout(std::move(layouts[i]), head_dim_);
    if (heads_[i].ring && layouts[i].n_dom > 0) throw Error("KV cache: a ring layer needs the identity key layout");
    fast += ((double)key_row_bytes(layouts[i]) - (double)key_row_bytes(heads_[i].layout)) * (double)n_ctx_;
  }
  if (fast_limit_ && fast > (double)fast_limit_)
    throw Error("kv_fast_limit: the KV cache in the profile's key layout needs " + gib(fast) +
                " of fast memory, over the limit of " + gib((double)fast_limit_) +
                (types_.tip_int8 ? " (without tip_int8 it needs less)" : ""));
  const int D = head_dim_;
  // One head at a time per thread: the extra memory is a head's key planes, not the cache's. An
  // allocation failure must not escape the parallel region; it is rethrown after it.
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (heads_[i].ring) continue;  // (identity before and after)
    try {
      const HeadPlanes& old = heads_[i];
      HeadPlanes h;  // the head's keys in the new layout (not offloaded: relayout refuses that)
      h.layout = layouts[i];
      allocate_keys(h);
      const KvHeadView from = view((int)(i / n_head_kv_), (int)(i % n_head_kv_), n_rows);
      std::vector<float> k(D), model(D), key(D);  // a key in the old cache order, model order, the new order
      for (int64_t p = 0; p < n_rows; ++p) {
        kv_load(from.k_dom_row(p), types_.k, from.n_dom, k.data());
        kv_load(from.k_rest_row(p), types_.k, D - from.n_dom, k.data() + from.n_dom);
        for (int j = 0; j < D; ++j) model[old.layout.perm[j]] = k[j];
        for (int j = 0; j < D; ++j) key[j] = model[h.layout.perm[j]];
        store_key(h, p, key.data());
      }
      HeadPlanes& to = heads_[i];  // the moves below cannot throw
      to.k_dom = std::move(h.k_dom);
      to.k_tip = std::move(h.k_tip);
      to.k_rest = std::move(h.k_rest);
      to.layout = std::move(h.layout);
    } catch (...) {
#pragma omp critical(kv_relayout_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void KvCache::store_key(HeadPlanes& h, int64_t row, const float* k) {
  const int nd = h.layout.n_dom, nr = head_dim_ - nd;
  uint8_t* dom = h.k_dom.data() + (size_t)row * kv_row_bytes(types_.k, nd);
  kv_store(k, types_.k, nd, dom);
  if (!h.k_tip.empty()) {  // quantized from K_dom as stored, so a relayout rebuilds the same copy
    thread_local std::vector<float> stored;  // [n_dom]
    stored.resize(nd);
    kv_load(dom, types_.k, nd, stored.data());
    kv_store(stored.data(), DType::Q8_0, nd, h.k_tip.data() + (size_t)row * kv_row_bytes(DType::Q8_0, nd));
  }
  if (h.slot < 0) kv_store(k + nd, types_.k, nr, h.k_rest.data() + (size_t)row * kv_row_bytes(types_.k, nr));
}

void KvCache::store(int layer, int kv_head, int64_t pos, const float* k, const float* v) {
  HeadPlanes& h = heads_[index(layer, kv_head)];
  const int nr = head_dim_ - h.layout.n_dom;
  const int* perm = h.layout.perm.data();
  thread_local std::vector<float> permuted;  // [head_dim]: the key in cache dim order
  permuted.resize(head_dim_);
  for (int i = 0; i < head_dim_; ++i) permuted[i] = k[perm[i]];
  if (h.ring) {  // (a ring head is never offloaded)
    const size_t v_bytes = kv_row_bytes(types_.v, head_dim_);
    for (int64_t row : {pos % h.ring, pos % h.ring + h.ring}) {
      store_key(h, row, permuted.data());
      kv_store(v, types_.v, head_dim_, h.v.data() + (size_t)row * v_bytes);
    }
    return;
  }
  store_key(h, pos, permuted.data());
  if (h.slot >= 0) {  // K_rest and V as one record of the offload's tail chunk
    offload_->prepare(pos);
    uint8_t* rec = offload_->tail_record(h.slot, pos);
    kv_store(permuted.data() + h.layout.n_dom, types_.k, nr, rec);
    kv_store(v, types_.v, head_dim_, rec + kv_row_bytes(types_.k, nr));
    return;
  }
  kv_store(v, types_.v, head_dim_, h.v.data() + (size_t)pos * kv_row_bytes(types_.v, head_dim_));
}

void KvCache::fill_random(int64_t p0, int64_t n, uint64_t seed) {
  const int n_heads = (int)heads_.size();
  std::vector<FillStream> streams;  // [n_layer * n_head_kv] each head's own
  for (int i = 0; i < n_heads; ++i) streams.emplace_back(seed, i / n_head_kv_, i % n_head_kv_);
  // With offloading, one chunk of positions at a time: the chunk is made the tail before the
  // threads store into it.
  for (int64_t a = p0, b; a < p0 + n; a = b) {
    b = offload_ ? std::min(p0 + n, (a / offload_->chunk() + 1) * offload_->chunk()) : p0 + n;
    if (offload_) offload_->prepare(a);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n_heads; ++i) {
      FillStream& stream = streams[i];
      std::vector<float> k(head_dim_), v(head_dim_);
      const int64_t ring = heads_[i].ring;
      for (int64_t p = ring ? std::max(a, p0 + n - ring) : a; p < b; ++p) {  // a ring keeps the last ones only
        for (int d = 0; d < head_dim_; ++d) k[d] = stream.next(), v[d] = stream.next();
        store(i / n_head_kv_, i % n_head_kv_, p, k.data(), v.data());
      }
    }
  }
}

void KvCache::permute_query(int layer, int kv_head, const float* q, float* out) const {
  const int* perm = heads_[index(layer, kv_head)].layout.perm.data();
  for (int i = 0; i < head_dim_; ++i) out[i] = q[perm[i]];
  if (types_.k == DType::F16)  // as llama.cpp rounds q for its F16 K dot: greedy runs then agree with it
    for (int i = 0; i < head_dim_; ++i) out[i] = fp16_to_fp32(fp32_to_fp16(out[i]));
}

KvHeadView KvCache::view(int layer, int kv_head, int64_t begin, int64_t end) const {
  const HeadPlanes& h = heads_[index(layer, kv_head)];
  if (h.ring && end - begin > h.ring)
    throw Error("KV cache: layer " + std::to_string(layer) + " keeps only its last " + std::to_string(h.ring) +
                " positions, not " + std::to_string(end - begin));
  const int64_t first = h.ring ? begin % h.ring : begin;  // the row of position `begin`
  const void* tip = h.k_tip.empty() ? nullptr : h.k_tip.data();
  const int64_t n = first + end - begin;
  const bool resident = h.slot < 0;
  return KvHeadView{h.k_dom.data(), resident ? h.k_rest.data() : nullptr, resident ? h.v.data() : nullptr, n, head_dim_,
                    h.layout.n_dom, types_.k, types_.v, tip, &bytes_read_}
      .from_row(first);
}

KvHeadView KvCache::gather(int layer, int kv_head, const int32_t* rows, int64_t n, bool decode, GatheredRows& g) const {
  const HeadPlanes& h = heads_[index(layer, kv_head)];
  const size_t dom = kv_row_bytes(types_.k, h.layout.n_dom), rest = kv_row_bytes(types_.k, head_dim_ - h.layout.n_dom),
               val = kv_row_bytes(types_.v, head_dim_);
  g.k_dom.resize(n * dom);
  g.k_rest.resize(n * rest);
  g.v.resize(n * val);
  offload_->fetch(h.slot, rows, n, g.k_rest.data(), rest, g.v.data(), decode);  // rest 0: every dim dominant
  for (int64_t j = 0; j < n; ++j)
    std::memcpy(g.k_dom.data() + j * dom, h.k_dom.data() + (size_t)rows[j] * dom, dom);
  return {g.k_dom.data(), g.k_rest.data(), g.v.data(), n, head_dim_, h.layout.n_dom, types_.k, types_.v, nullptr, &bytes_read_};
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (auto& h : heads_) b += h.k_dom.size() + h.k_tip.size() + h.k_rest.size() + h.v.size();
  return b;
}

KvMemory KvCache::memory() const {
  KvMemory m;
  m.fast = bytes();
  for (const HeadPlanes& h : heads_)
    m.full += (size_t)rows(h) * (kv_row_bytes(types_.k, head_dim_) + kv_row_bytes(types_.v, head_dim_));
  if (offload_) {
    m.fast += offload_->tail_bytes() + offload_->prefetch_buffer_bytes() + offload_->tier().ram_bytes();
    m.slow = offload_->slow_bytes();
    m.page_cache = offload_->tier().page_cache_bytes();
    m.rows = offload_->counts();
  }
  return m;
}

}  // namespace fasa
