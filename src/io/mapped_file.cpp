#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fasa/error.h"

namespace fasa {

namespace {

// n bytes of fd into p, or the reason it could not.
void read_all(int fd, uint8_t* p, size_t n, const std::string& path) {
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd, p + done, std::min<size_t>(n - done, size_t(1) << 30), (off_t)done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
    if (got == 0) fail(path, "the file shrank to " + std::to_string(done) + " bytes while it was read");
    done += (size_t)got;
  }
}

}  // namespace

MappedFile::MappedFile(const std::string& path, bool map) : path_(path), mapped_(map) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  // Read in: anonymous pages (so the loader may drop those it has packed), read-only once filled.
  void* p = map ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0)
                : ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail(path, std::string(map ? "cannot mmap: " : "cannot allocate memory to read it: ") + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  if (map) return;
  try {
    read_all(fd, static_cast<uint8_t*>(p), size_, path);
  } catch (...) {
    ::munmap(p, size_);
    data_ = nullptr;
    throw;
  }
  ::mprotect(p, size_, PROT_READ);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace fasa
