#pragma once
// The slow tier of FASA-M's KV cache: where K_rest and V rows live when they are not in fast memory.
// Data moves in chunks (every offloaded head's rows of a fixed run of positions), written whole and
// read back in pieces: a step reads only the rows its heads selected.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fasa {

class SlowTier {
 public:
  virtual ~SlowTier() = default;
  // Stores chunk c whole (chunk_bytes, fixed at creation).
  virtual void write_chunk(int64_t c, const uint8_t* data) = 0;
  // Reads n bytes at offset off of chunk c, which was written before. Thread-safe.
  virtual void read(int64_t c, size_t off, size_t n, uint8_t* out) const = 0;
  // The n bytes at offset off of written chunk c where they can be read in place (in this process's
  // memory), or null: then read() them.
  virtual const uint8_t* mapped(int64_t /*c*/, size_t /*off*/, size_t /*n*/) const { return nullptr; }
  // Rows this close together are fetched in one read (see KvOffload::joins).
  virtual size_t join_gap_bytes() const { return 0; }
  // Throws fasa::Error when the tier can no longer be trusted (its file deleted or shortened).
  virtual void check() const {}
  // Bytes of the tier's data the OS keeps cached in RAM (the file's page cache); 0 when unknown.
  virtual size_t page_cache_bytes() const { return 0; }
  virtual std::string describe() const = 0;
};

// A second allocation in RAM: the same code path as a file, without the disk.
std::unique_ptr<SlowTier> make_ram_tier(size_t chunk_bytes);
// A temporary file in `dir` (removed with the tier), room for max_chunks chunks. Rows are read in
// place through a read-only mapping (a selected row costs a copy from the page cache or a page
// fault to disk, not a system call); where the mapping fails, by positioned reads (pread). Readahead
// is off, and each chunk is flushed to disk and dropped from the page cache once written, so the page
// cache holds only what the steps since read back, not the whole KV cache (POSIX_FADV_DONTNEED after
// sync_file_range; O_DIRECT would force 4 KiB-aligned reads of ~200-byte rows).
std::unique_ptr<SlowTier> make_file_tier(const std::string& dir, size_t chunk_bytes, int64_t max_chunks);

}  // namespace fasa
