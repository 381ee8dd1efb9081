#include "kv/kv_cache.h"

#include <unistd.h>

#include <string>

#include "util/error.h"

namespace fasa {

size_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

KvCache::KvCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx)
    : n_head_kv_(n_head_kv), head_dim_(head_dim), n_ctx_(n_ctx) {
  const double need = 2.0 * n_layer * n_head_kv * (double)n_ctx * head_dim * sizeof(float);
  const size_t have = physical_memory_bytes();
  if (n_ctx <= 0) throw Error("context size must be positive, got " + std::to_string(n_ctx));
  if (have && need > 0.9 * (double)have)
    throw Error("KV cache for " + std::to_string(n_ctx) + " tokens needs " + std::to_string((size_t)need) +
                " bytes; this machine has " + std::to_string(have) + " (use a smaller -c)");
  const size_t n = (size_t)n_layer * n_head_kv * n_ctx * head_dim;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

}  // namespace fasa
