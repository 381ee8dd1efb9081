#include "api/kv_memory_report.h"

#include <cstdio>

namespace fasa {

nlohmann::json kv_memory_json(const KvMemory& m) {
  return {{"kv_fast_bytes", m.fast},     {"kv_slow_bytes", m.slow},     {"kv_device_bytes", m.device}, {"kv_host_read_bytes", m.rows.host_bytes},
          {"kv_full_bytes", m.full},     {"kv_page_cache_bytes", m.page_cache},
          {"rss_bytes", m.rss},          {"kv_rows_from_tail", m.rows.tail},
          {"kv_prefetch_hits", m.rows.hits}, {"kv_slow_reads", m.rows.misses},
          {"kv_prefetch_hit_rate", m.rows.hit_rate()}, {"kv_disk_read_bytes", m.rows.disk_bytes}};
}

std::string kv_memory_line(const KvMemory& m) {
  const double mib = 1048576.0;
  char line[320];
  if (m.device)
    std::snprintf(line, sizeof line,
                  "kv: on the GPU %.1f MiB (K, V and any K_dom planes), in host memory %.1f MiB (FASA-M's K and V; "
                  "%.1f MiB of rows read from there), a dense cache %.1f MiB; process RSS %.1f MiB",
                  m.device / mib, m.slow / mib, m.rows.host_bytes / mib, m.full / mib, m.rss / mib);
  else
    std::snprintf(line, sizeof line,
                "kv: fast %.1f MiB, slow %.1f MiB (%.1f MiB of it in the page cache), a dense cache %.1f MiB (%.2fx "
                "the fast tier); process RSS %.1f MiB",
                m.fast / mib, m.slow / mib, m.page_cache / mib, m.full / mib, m.fast ? (double)m.full / m.fast : 0.0,
                m.rss / mib);
  std::string s = line;
  if (m.rows.hits + m.rows.misses + m.rows.tail > 0) {
    std::snprintf(line, sizeof line,
                  "; rows fetched: %llu from the slow tier, %llu prefetched (hit rate %.1f%%), %llu from RAM",
                  (unsigned long long)m.rows.misses, (unsigned long long)m.rows.hits, 100 * m.rows.hit_rate(),
                  (unsigned long long)m.rows.tail);
    s += line;
    if (m.rows.on_disk) {
      std::snprintf(line, sizeof line, "; %.1f MiB read from disk", m.rows.disk_bytes / mib);
      s += line;
    }
  }
  return s;
}

}  // namespace fasa
