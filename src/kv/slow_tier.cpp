#include "kv/slow_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "fasa/error.h"

namespace fasa {

std::vector<size_t> SlowTierShape::head_offsets() const {
  std::vector<size_t> out;
  size_t b = 0;
  for (size_t r : row_bytes) {
    out.push_back(b);
    b += (size_t)chunk_rows * r;
  }
  return out;
}

size_t SlowTierShape::chunk_bytes() const {
  return row_bytes.empty() ? 0 : head_offsets().back() + (size_t)chunk_rows * row_bytes.back();
}

size_t page_map_bytes(size_t file_bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (file_bytes + page - 1) / page;
}

size_t plan_page_runs(size_t base, const int32_t* rows, size_t n, size_t row_bytes, size_t page_bytes,
                      size_t join_pages, std::atomic<uint8_t>* asked, std::vector<PageRun>& runs) {
  runs.clear();
  size_t fresh = 0;
  auto mark = [&](size_t p) { fresh += asked[p].exchange(1, std::memory_order_relaxed) == 0; };
  for (size_t i = 0; i < n; ++i) {
    const size_t off = base + (size_t)rows[i] * row_bytes;
    for (size_t p = off / page_bytes; p <= (off + row_bytes - 1) / page_bytes; ++p) {
      if (asked[p].load(std::memory_order_relaxed)) continue;
      if (!runs.empty() && p - (runs.back().first + runs.back().count) <= join_pages) {
        for (size_t q = runs.back().first + runs.back().count; q <= p; ++q) mark(q);
        runs.back().count = p - runs.back().first + 1;
      } else {
        mark(p);
        runs.push_back({p, 1});
      }
    }
  }
  return fresh;
}

namespace {

class RamTier final : public SlowTier {
 public:
  explicit RamTier(const SlowTierShape& shape)
      : shape_(shape), chunk_bytes_(shape.chunk_bytes()), head_offset_(shape.head_offsets()) {}
  void write_chunk(int64_t c, const uint8_t* data) override {
    if ((size_t)c >= chunks_.size()) chunks_.resize(c + 1);
    chunks_[c].assign(data, data + chunk_bytes_);
  }
  void read(int s, int64_t row, int64_t n, uint8_t* out) const override {
    std::memcpy(out, mapped(s, row, n), (size_t)n * shape_.row_bytes[s]);
  }
  const uint8_t* mapped(int s, int64_t row, int64_t n) const override {
    const int64_t c = row / shape_.chunk_rows;
    if ((size_t)c >= chunks_.size() || chunks_[c].empty() || (row + n - 1) / shape_.chunk_rows != c)
      throw Error("KV slow tier (ram): read of an unwritten chunk");
    return chunks_[c].data() + head_offset_[s] + (size_t)(row % shape_.chunk_rows) * shape_.row_bytes[s];
  }
  std::string describe() const override { return "ram"; }

 private:
  SlowTierShape shape_;
  size_t chunk_bytes_;
  std::vector<size_t> head_offset_;           // [heads] byte offset of each head's rows in a chunk
  std::vector<std::vector<uint8_t>> chunks_;  // [chunk][chunk_bytes_]
};

class FileTier final : public SlowTier {
 public:
  FileTier(const std::string& dir, const SlowTierShape& shape) : shape_(shape) {
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail(dir, "kv_offload file: not a directory");
    std::string tmpl = dir + (dir.empty() || dir.back() == '/' ? "" : "/") + "fasa-kv-XXXXXX";
    fd_ = mkstemp(tmpl.data());
    if (fd_ < 0) fail(dir, std::string("cannot create the KV cache file: ") + std::strerror(errno));
    path_ = tmpl;
    posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);  // a step reads scattered rows: no readahead
    for (size_t r : shape_.row_bytes) {
      base_.push_back(map_len_);
      map_len_ += (size_t)(shape_.max_chunks * shape_.chunk_rows) * r;
    }
    asked_ = std::make_unique<std::atomic<uint8_t>[]>(page_map_bytes(map_len_));
    // Rows are read through a read-only mapping of the whole file-to-be: a selected row costs a copy
    // from the page cache, not a system call. Only the written part is ever touched, after check()
    // has seen the file hold it.
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
    for (size_t s = 0; s < base_.size(); ++s) {
      const size_t n = piece_bytes(s);
      write_at(offset(s, c * shape_.chunk_rows), data, n);
      data += n;
    }
    // Written back and dropped: the page cache must not quietly become a second full KV cache. Pages
    // mapped in this process are not dropped, so the mapping lets go of them first.
    if (sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      fail(path_, std::string("writing the KV cache back to disk failed: ") + std::strerror(errno));
    for (size_t s = 0; s < base_.size(); ++s) {
      const size_t off = offset(s, c * shape_.chunk_rows);
      const size_t first = off / page_, pages = (off + piece_bytes(s) - 1) / page_ + 1 - first;
      if (map_) madvise(const_cast<uint8_t*>(map_) + first * page_, pages * page_, MADV_DONTNEED);
      posix_fadvise(fd_, (off_t)(first * page_), (off_t)(pages * page_), POSIX_FADV_DONTNEED);
      for (size_t p = first; p < first + pages; ++p) asked_[p].store(0, std::memory_order_relaxed);
    }
    int64_t end = (c + 1) * shape_.chunk_rows, seen = written_rows_.load();
    while (end > seen && !written_rows_.compare_exchange_weak(seen, end)) {
    }
  }

  void read(int s, int64_t row, int64_t n, uint8_t* out) const override {
    const size_t bytes = (size_t)n * shape_.row_bytes[s];
    const off_t base = (off_t)offset(s, row);
    for (size_t done = 0; done < bytes;) {
      const ssize_t r = pread(fd_, out + done, bytes - done, base + (off_t)done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(path_, std::string("reading the KV cache failed: ") + std::strerror(errno));
      if (r == 0) fail(path_, "the KV cache file is shorter than what was written to it (was it truncated?)");
      done += (size_t)r;
    }
  }

  const uint8_t* mapped(int s, int64_t row, int64_t n) const override {
    return map_ && row + n <= written_rows_.load() ? map_ + offset(s, row) : nullptr;
  }
  size_t join_gap_bytes() const override { return map_ ? 0 : page_; }

  void will_read(int s, const int32_t* rows, size_t n) const override {
    thread_local std::vector<PageRun> runs;
    disk_bytes_ += plan_page_runs(base_[s], rows, n, shape_.row_bytes[s], page_, kJoinPages, asked_.get(), runs) * page_;
    // The kernel reads at most its readahead window per call (128 KiB by default): long runs go in
    // pieces, or their tails would be marked asked but never read.
    const size_t piece = std::max<size_t>(1, kMaxRequestBytes / page_);
    for (const PageRun& r : runs)
      for (size_t p = r.first; p < r.first + r.count; p += piece)
        posix_fadvise(fd_, (off_t)(p * page_), (off_t)(std::min(piece, r.first + r.count - p) * page_), POSIX_FADV_WILLNEED);
  }

  void check() const override {
    struct stat st{};
    if (fstat(fd_, &st) != 0) fail(path_, std::string("cannot stat the KV cache file: ") + std::strerror(errno));
    if (st.st_nlink == 0) fail(path_, "the KV cache file was deleted while in use");
    // The last head's region ends the file: it is short if any written row is missing.
    const int64_t rows = written_rows_.load();
    if (rows > 0 && (size_t)st.st_size < offset(base_.size() - 1, rows))
      fail(path_, "the KV cache file is shorter than what was written to it (was it truncated?)");
  }

  size_t page_cache_bytes() const override {
    struct stat st{};
    if (fstat(fd_, &st) != 0 || st.st_size == 0) return 0;
    void* map = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd_, 0);
    if (map == MAP_FAILED) return 0;
    std::vector<unsigned char> resident(((size_t)st.st_size + page_ - 1) / page_);
    size_t n = 0;
    if (mincore(map, (size_t)st.st_size, resident.data()) == 0)
      for (unsigned char r : resident) n += r & 1;
    munmap(map, (size_t)st.st_size);
    return n * page_;
  }

  uint64_t disk_read_bytes() const override { return disk_bytes_.load(); }
  bool on_disk() const override { return true; }
  size_t ram_bytes() const override { return page_map_bytes(map_len_); }
  std::string describe() const override { return "file " + path_; }

 private:
  size_t offset(size_t s, int64_t row) const { return base_[s] + (size_t)row * shape_.row_bytes[s]; }
  size_t piece_bytes(size_t s) const { return (size_t)shape_.chunk_rows * shape_.row_bytes[s]; }
  void write_at(size_t off, const uint8_t* data, size_t n) {
    // Reserve the space first, so a full disk is an error here rather than a sparse hole later.
    if (int err = posix_fallocate(fd_, (off_t)off, (off_t)n); err != 0 && err != EINVAL && err != EOPNOTSUPP)
      fail(path_, "cannot reserve " + std::to_string(n) + " bytes for the KV cache (" + std::strerror(err) +
                      (err == ENOSPC ? ": the disk is full" : "") + ")");
    for (size_t done = 0; done < n;) {
      const ssize_t w = pwrite(fd_, data + done, n - done, (off_t)(off + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(path_, std::string("writing the KV cache failed: ") + (w < 0 ? std::strerror(errno) : "no progress"));
      done += (size_t)w;
    }
  }

  SlowTierShape shape_;
  int fd_ = -1;
  std::string path_;
  std::vector<size_t> base_;              // [heads] where each head's region starts
  size_t map_len_ = 0;                    // the file-to-be: every region at max_chunks chunks
  // Disk reads cost about the same up to a few pages: a run of asked pages takes in gaps this short.
  static constexpr size_t kJoinPages = 16;
  static constexpr size_t kMaxRequestBytes = 128 << 10;
  const size_t page_ = (size_t)sysconf(_SC_PAGESIZE);
  std::atomic<int64_t> written_rows_{0};  // rows of every head the file must hold
  std::unique_ptr<std::atomic<uint8_t>[]> asked_;  // [pages] read ahead since its chunk was written
  mutable std::atomic<uint64_t> disk_bytes_{0};
  const uint8_t* map_ = nullptr;          // [map_len_] the file, read-only; null: pread
};

}  // namespace

std::unique_ptr<SlowTier> make_ram_tier(const SlowTierShape& shape) { return std::make_unique<RamTier>(shape); }

std::unique_ptr<SlowTier> make_file_tier(const std::string& dir, const SlowTierShape& shape) {
  return std::make_unique<FileTier>(dir, shape);
}

}  // namespace fasa
