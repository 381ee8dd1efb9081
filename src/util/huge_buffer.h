#pragma once
// A large buffer the kernel may back with 2 MiB pages (transparent huge pages where the system allows
// them on request, as Debian's default "madvise" does): a decode step streams the packed weights
// once, and with 4 KiB pages the TLB misses cost a quarter of the bandwidth (one-token Q4_K matmul
// over 151 MB on a 2-core Zen 4 VM: 24-27 GB/s with 4 KiB pages, 32-33 GB/s with 2 MiB ones).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fasa {

class HugeBuffer {
 public:
  explicit HugeBuffer(size_t bytes);  // uninitialised; throws std::bad_alloc
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_;
};

}  // namespace fasa
