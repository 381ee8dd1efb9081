#pragma once
// What this machine and process hold: the memory checks before a model's weights or a KV cache are
// allocated (refuse or fall back with the sizes, never an out-of-memory kill), and the figures the run
// header, `fasa bench` and the server report.
#include <cstddef>
#include <string>

namespace fasa {

// Bytes available for new allocations: /proc/meminfo's MemAvailable, lowered to a cgroup's memory.max
// headroom inside a container, or FASA_MEMORY_LIMIT_MIB where set (a stated limit, for tests and for
// sharing a machine); 0 when unknown.
size_t available_memory_bytes();
// Whether a new allocation of `bytes` would take more than 90 % of `have` (available_memory_bytes());
// false where that is unknown (0). The one rule for the weights' packed copy and the KV cache.
inline bool over_available(double bytes, size_t have) { return have > 0 && bytes > 0.9 * (double)have; }
size_t resident_memory_bytes();       // this process's resident set now (0 when unknown)
size_t peak_resident_memory_bytes();  // its high-water mark since it started (0 when unknown)
std::string mib_text(double bytes);   // "1234.5 MiB"

}  // namespace fasa
