#include "util/huge_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace fasa {

namespace {
constexpr size_t kHugePage = 2u << 20;
}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(kHugePage, rounded > 0 ? rounded : kHugePage);
  if (!p) throw std::bad_alloc();
  data_.reset(static_cast<uint8_t*>(p));
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // a request, before the pages are first touched; without THP they stay small
#endif
}

void HugeBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

}  // namespace fasa
