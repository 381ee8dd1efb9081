#pragma once
// Helpers for the libFuzzer harnesses: readers take paths, so each input is written to an in-memory
// file (memfd) and handed over as /proc/self/fd/N; a fasa::Error is the expected way to fail.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace fasa::fuzz {

// An in-memory file rewritten with each input.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) std::abort();
  }
  // Replaces the contents; returns a path that opens them.
  std::string write(std::string_view bytes) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, bytes.data(), bytes.size(), 0) != (ssize_t)bytes.size()) std::abort();
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

// Splits an input into parts at a separator line, so one input can carry several files.
inline std::string_view next_part(std::string_view& rest, std::string_view sep = "\n----\n") {
  const size_t at = rest.find(sep);
  std::string_view part = rest.substr(0, at);
  rest = at == std::string_view::npos ? std::string_view() : rest.substr(at + sep.size());
  return part;
}

}  // namespace fasa::fuzz
