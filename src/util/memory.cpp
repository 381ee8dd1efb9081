#include "util/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace fasa {

namespace {
// A cgroup v2 limit's headroom (memory.max less what it holds but its page cache, which the kernel
// reclaims: a model file read before is charged there), or 0 where there is none.
size_t cgroup_headroom() {
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  size_t max = 0, current = 0;
  if (!(max_file >> max) || !(current_file >> current)) return 0;  // "max" (no limit) fails to parse
  std::ifstream stat("/sys/fs/cgroup/memory.stat");
  for (std::string key; stat >> key;) {
    size_t bytes = 0;
    if (!(stat >> bytes)) break;
    if (key == "file") current -= std::min(current, bytes);
  }
  return max > current ? max - current : 1;
}
}  // namespace

size_t available_memory_bytes() {
  if (const char* limit = std::getenv("FASA_MEMORY_LIMIT_MIB")) {
    char* end = nullptr;
    const double mib = std::strtod(limit, &end);
    if (end != limit && *end == '\0' && mib > 0 && mib < 1e12) return (size_t)(mib * 1048576.0);
  }
  size_t have = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;  // "MemAvailable:   12345678 kB"
  while (std::getline(meminfo, line))
    if (line.starts_with("MemAvailable:")) {
      have = (size_t)std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;
      break;
    }
  if (have == 0) {  // no /proc: all of it
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    have = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
  }
  const size_t cgroup = cgroup_headroom();
  return cgroup && have ? std::min(have, cgroup) : have;
}

size_t resident_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * (size_t)sysconf(_SC_PAGE_SIZE);
}

size_t peak_resident_memory_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (size_t)u.ru_maxrss * 1024;  // Linux reports KiB
}

std::string mib_text(double bytes) {
  char b[48];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
  return b;
}

}  // namespace fasa
