#pragma once
// Bytes of KV cache read by the attention kernels (gathered attention, FASA's TIP scan), summed over
// threads. `fasa bench` reports them per decoded token; a relaxed atomic add per kernel call is noise
// next to the rows each call reads.
#include <atomic>
#include <cstdint>

namespace fasa {

inline std::atomic<uint64_t>& kv_bytes_counter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}
inline void count_kv_bytes_read(uint64_t n) { kv_bytes_counter().fetch_add(n, std::memory_order_relaxed); }
inline uint64_t kv_bytes_read() { return kv_bytes_counter().load(std::memory_order_relaxed); }

}  // namespace fasa
