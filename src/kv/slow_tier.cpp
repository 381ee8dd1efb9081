#include "kv/slow_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "fasa/error.h"

namespace fasa {

namespace {

class RamTier final : public SlowTier {
 public:
  explicit RamTier(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}
  void write_chunk(int64_t c, const uint8_t* data) override {
    if ((size_t)c >= chunks_.size()) chunks_.resize(c + 1);
    chunks_[c].assign(data, data + chunk_bytes_);
  }
  void read(int64_t c, size_t off, size_t n, uint8_t* out) const override { std::memcpy(out, mapped(c, off, n), n); }
  const uint8_t* mapped(int64_t c, size_t off, size_t n) const override {
    if ((size_t)c >= chunks_.size() || chunks_[c].size() < off + n) throw Error("KV slow tier (ram): read of an unwritten chunk");
    return chunks_[c].data() + off;
  }
  std::string describe() const override { return "ram"; }

 private:
  size_t chunk_bytes_;
  std::vector<std::vector<uint8_t>> chunks_;  // [chunk][chunk_bytes]
};

class FileTier final : public SlowTier {
 public:
  FileTier(const std::string& dir, size_t chunk_bytes, int64_t max_chunks) : chunk_bytes_(chunk_bytes) {
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(dir, "--kv-offload file: not a directory");
    std::string tmpl = dir + (dir.empty() || dir.back() == '/' ? "" : "/") + "fasa-kv-XXXXXX";
    fd_ = mkstemp(tmpl.data());
    if (fd_ < 0) fail(dir, std::string("cannot create the KV cache file: ") + std::strerror(errno));
    path_ = tmpl;
    posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);  // a step reads scattered rows: no readahead
    // Rows are read through a read-only mapping of the whole file-to-be: a selected row costs a copy
    // from the page cache (or a page fault to disk), not a system call. Only the written part is ever
    // touched, after check() has seen the file hold it.
    map_len_ = chunk_bytes * (size_t)max_chunks;
    void* m = mmap(nullptr, map_len_, PROT_READ, MAP_SHARED, fd_, 0);
    if (m != MAP_FAILED) {
      map_ = static_cast<const uint8_t*>(m);
      madvise(m, map_len_, MADV_RANDOM);
    }
  }
  ~FileTier() override {
    if (map_) munmap(const_cast<uint8_t*>(map_), map_len_);
    close(fd_);
    unlink(path_.c_str());
  }

  void write_chunk(int64_t c, const uint8_t* data) override {
    const off_t off = (off_t)(c * chunk_bytes_);
    // Reserve the space first, so a full disk is an error here rather than a sparse hole later.
    if (int err = posix_fallocate(fd_, off, (off_t)chunk_bytes_); err != 0 && err != EINVAL && err != EOPNOTSUPP)
      fail(path_, "cannot reserve " + std::to_string(chunk_bytes_) + " bytes for the KV cache (" + std::strerror(err) +
                      (err == ENOSPC ? ": the disk is full" : "") + ")");
    for (size_t done = 0; done < chunk_bytes_;) {
      const ssize_t w = pwrite(fd_, data + done, chunk_bytes_ - done, off + (off_t)done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(path_, std::string("writing the KV cache failed: ") + (w < 0 ? std::strerror(errno) : "no progress"));
      done += (size_t)w;
    }
    // Written back and dropped: the page cache must not quietly become a second full KV cache. Pages
    // mapped in this process are not dropped, so the mapping lets go of them first.
    sync_file_range(fd_, off, (off_t)chunk_bytes_, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    if (map_) madvise(const_cast<uint8_t*>(map_), map_len_, MADV_DONTNEED);
    posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    int64_t end = (int64_t)(off + (off_t)chunk_bytes_), seen = written_end_.load();
    while (end > seen && !written_end_.compare_exchange_weak(seen, end)) {
    }
  }

  void read(int64_t c, size_t off, size_t n, uint8_t* out) const override {
    const off_t base = (off_t)(c * chunk_bytes_ + off);
    for (size_t done = 0; done < n;) {
      const ssize_t r = pread(fd_, out + done, n - done, base + (off_t)done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(path_, std::string("reading the KV cache failed: ") + std::strerror(errno));
      if (r == 0) fail(path_, "the KV cache file is shorter than what was written to it (was it truncated?)");
      done += (size_t)r;
    }
  }

  const uint8_t* mapped(int64_t c, size_t off, size_t n) const override {
    const size_t base = (size_t)c * chunk_bytes_ + off;
    return map_ && (int64_t)(base + n) <= written_end_.load() ? map_ + base : nullptr;
  }
  size_t join_gap_bytes() const override { return map_ ? 0 : 4096; }

  void check() const override {
    struct stat st{};
    if (fstat(fd_, &st) != 0) fail(path_, std::string("cannot stat the KV cache file: ") + std::strerror(errno));
    if (st.st_nlink == 0) fail(path_, "the KV cache file was deleted while in use");
    if (st.st_size < written_end_.load())
      fail(path_, "the KV cache file is shorter than what was written to it (was it truncated?)");
  }

  size_t page_cache_bytes() const override {
    struct stat st{};
    if (fstat(fd_, &st) != 0 || st.st_size == 0) return 0;
    void* map = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd_, 0);
    if (map == MAP_FAILED) return 0;
    const long page = sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> resident(((size_t)st.st_size + page - 1) / page);
    size_t n = 0;
    if (mincore(map, (size_t)st.st_size, resident.data()) == 0)
      for (unsigned char r : resident) n += r & 1;
    munmap(map, (size_t)st.st_size);
    return n * (size_t)page;
  }

  std::string describe() const override { return "file " + path_; }

 private:
  size_t chunk_bytes_;
  int fd_ = -1;
  std::string path_;
  std::atomic<int64_t> written_end_{0};  // bytes the file must hold
  const uint8_t* map_ = nullptr;          // [map_len_] the file, read-only; null: pread
  size_t map_len_ = 0;
};

}  // namespace

std::unique_ptr<SlowTier> make_ram_tier(size_t chunk_bytes) { return std::make_unique<RamTier>(chunk_bytes); }

std::unique_ptr<SlowTier> make_file_tier(const std::string& dir, size_t chunk_bytes, int64_t max_chunks) {
  return std::make_unique<FileTier>(dir, chunk_bytes, max_chunks);
}

}  // namespace fasa
