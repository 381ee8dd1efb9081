#include "kv/kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>

#include "fasa/error.h"

namespace fasa {

size_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib;
  while (meminfo >> key >> kib)
    if (key == "MemAvailable:") return kib * 1024;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);  // no /proc: all of it
  return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

KvCache::KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx, std::vector<KeyLayout> layouts,
                 DType type)
    : n_head_kv_(n_head_kv), head_dim_(head_dim), n_ctx_(n_ctx), type_(type) {
  if (n_ctx <= 0) throw Error("context size must be positive, got " + std::to_string(n_ctx));
  if (type != DType::F16 && type != DType::F32) throw Error(std::string("KV cache: no ") + dtype_name(type) + " cache");
  const size_t eb = kv_elem_bytes(type);
  const double need = 2.0 * n_layer * n_head_kv * (double)n_ctx * head_dim * eb;
  const size_t have = available_memory_bytes();
  if (have && need > 0.9 * (double)have) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "the KV cache for %lld tokens needs %.0f bytes (%.2f GiB) but only %zu bytes (%.2f GiB) "
                  "of memory are available (use a smaller context)", (long long)n_ctx, need, need / 1073741824.0, have,
                  have / 1073741824.0);
    throw Error(msg);
  }
  const size_t n_heads = (size_t)n_layer * n_head_kv;
  if (!layouts.empty() && layouts.size() != n_heads)
    throw Error("KV cache: " + std::to_string(layouts.size()) + " key layouts for " + std::to_string(n_heads) +
                " heads");
  heads_.resize(n_heads);
  for (size_t i = 0; i < n_heads; ++i) {
    HeadPlanes& h = heads_[i];
    h.layout = layouts.empty() ? KeyLayout{} : std::move(layouts[i]);
    if (h.layout.perm.empty()) {
      h.layout.perm.resize(head_dim);
      std::iota(h.layout.perm.begin(), h.layout.perm.end(), 0);
      h.layout.n_dom = 0;
    }
    std::vector<int> sorted = h.layout.perm;
    std::sort(sorted.begin(), sorted.end());
    for (int d = 0; d < head_dim; ++d)
      if ((int)sorted.size() != head_dim || sorted[d] != d) throw Error("KV cache: key layout is not a permutation");
    if (h.layout.n_dom < 0 || h.layout.n_dom > head_dim) throw Error("KV cache: key layout n_dom out of range");
    h.k_dom.assign((size_t)n_ctx * h.layout.n_dom * eb, 0);
    h.k_rest.assign((size_t)n_ctx * (head_dim - h.layout.n_dom) * eb, 0);
    h.v.assign((size_t)n_ctx * head_dim * eb, 0);
  }
}

void KvCache::store(int layer, int kv_head, int64_t pos, const float* k, const float* v) {
  HeadPlanes& h = heads_[index(layer, kv_head)];
  const int nd = h.layout.n_dom, nr = head_dim_ - nd;
  const int* perm = h.layout.perm.data();
  const size_t eb = kv_elem_bytes(type_);
  thread_local std::vector<float> permuted;  // [head_dim]: the key in cache dim order
  permuted.resize(head_dim_);
  for (int i = 0; i < head_dim_; ++i) permuted[i] = k[perm[i]];
  kv_store(permuted.data(), type_, nd, h.k_dom.data() + (size_t)pos * nd * eb);
  kv_store(permuted.data() + nd, type_, nr, h.k_rest.data() + (size_t)pos * nr * eb);
  kv_store(v, type_, head_dim_, h.v.data() + (size_t)pos * head_dim_ * eb);
}

void KvCache::fill_random(int64_t p0, int64_t n, uint64_t seed) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int l = 0; l < n_layer(); ++l)
    for (int h = 0; h < n_head_kv_; ++h) {
      uint64_t s = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (((uint64_t)l << 32) + (uint64_t)h + 1);
      std::vector<float> k(head_dim_), v(head_dim_);
      auto uniform = [&] {  // xorshift64*, scaled to unit variance
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        return ((float)((s * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 1.7320508f;
      };
      for (int64_t p = p0; p < p0 + n; ++p) {
        for (int d = 0; d < head_dim_; ++d) k[d] = uniform(), v[d] = uniform();
        store(l, h, p, k.data(), v.data());
      }
    }
}

void KvCache::permute_query(int layer, int kv_head, const float* q, float* out) const {
  const int* perm = heads_[index(layer, kv_head)].layout.perm.data();
  for (int i = 0; i < head_dim_; ++i) out[i] = q[perm[i]];
  if (type_ == DType::F16)  // as llama.cpp rounds q for its F16 K dot: greedy runs then agree with it
    for (int i = 0; i < head_dim_; ++i) out[i] = fp16_to_fp32(fp32_to_fp16(out[i]));
}

KvHeadView KvCache::view(int layer, int kv_head, int64_t n_tokens) const {
  const HeadPlanes& h = heads_[index(layer, kv_head)];
  return {h.k_dom.data(), h.k_rest.data(), h.v.data(), n_tokens, head_dim_, h.layout.n_dom, type_};
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (auto& h : heads_) b += h.k_dom.size() + h.k_rest.size() + h.v.size();
  return b;
}

}  // namespace fasa
