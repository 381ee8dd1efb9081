#pragma once
// Where a context's KV cache lives, in bytes, and where FASA-M's fetched rows came from.
#include <cstddef>
#include <cstdint>

namespace fasa {

// Offloaded rows a step read, by source, since the context was made.
struct KvFetchCounts {
  uint64_t tail = 0;        // from the RAM chunk that appends go to (the newest positions)
  uint64_t hits = 0;        // from the prefetch buffers
  uint64_t misses = 0;      // read from the slow tier while the step waited
  uint64_t prefetched = 0;  // read ahead by the prefetch thread
  uint64_t disk_bytes = 0;  // bytes the file tier asked the disk for (pages not read since written)
  bool on_disk = false;     // the slow tier is a file (else RAM: disk_bytes stays 0)
  uint64_t host_bytes = 0;  // on the GPU (-ngl) with FASA-M: bytes of K and V rows read from host memory
  double hit_rate() const { return hits + misses ? (double)hits / (double)(hits + misses) : 0.0; }
};

struct KvMemory {
  size_t fast = 0;        // RAM of the cache: its planes, the tail chunk, prefetch buffers, the file tier's page map
  size_t device = 0;      // GPU memory of the cache (-ngl): K, V and FASA's K_dom planes (then `slow`: FASA-M's
                          // K and V in host memory, `rows.host_bytes`: the rows the GPU read from there)
  size_t slow = 0;        // in the slow tier (--kv-offload)
  size_t full = 0;        // a dense cache of the same context and element type
  size_t page_cache = 0;  // the slow tier file's data the OS holds in RAM
  size_t rss = 0;         // the whole process's resident memory (weights included)
  KvFetchCounts rows;
};

}  // namespace fasa
