#pragma once
// Bytes of KV cache read by the attention kernels (gathered attention) and by the selection policies
// (FASA's TIP scan, the baselines' key scans), plus the per-row state a policy keeps across steps and
// reads to select (Quest's page summaries, H2O's scores and flags, SnapKV's ranking); not a call's own
// scratch, such as score arrays. Each is counted where the read happens: once for what the query heads
// of a KV head read together (gathered attention, FASA's group TIP), per head where each head reads on
// its own (Oracle's and SparQ's scans, Quest's summaries). Summed over threads into the counter of the cache the view came from
// (KvCache::bytes_read(): one per context, none process-wide). `fasa bench` reports them per decoded
// token; a relaxed atomic add per call is noise next to the rows each call reads.
#include <atomic>
#include <cstdint>

#include "ops/kv_view.h"

namespace fasa {

inline void count_kv_bytes_read(const KvHeadView& kv, uint64_t n) {
  if (kv.bytes_read) kv.bytes_read->fetch_add(n, std::memory_order_relaxed);
}

}  // namespace fasa
