#pragma once
// The slow tier of FASA-M's KV cache: where K_rest and V rows live when they are not in fast memory.
// Each offloaded head's rows form one array (row r of head s at r * row_bytes[s]); they arrive a
// chunk at a time (chunk_rows positions of every head), written whole, and are read back in
// pieces: a step reads only the rows its heads selected.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fasa {

struct SlowTierShape {
  std::vector<size_t> row_bytes;  // [heads] bytes of one row of each head
  int64_t chunk_rows = 0;         // positions per chunk
  int64_t max_chunks = 0;         // chunks the context can hold
  // A chunk holds every head's chunk_rows rows, head after head: where each head's start [heads],
  // and the chunk's bytes.
  std::vector<size_t> head_offsets() const;
  size_t chunk_bytes() const;
};

// RAM the file tier keeps about a file of file_bytes: a byte per page (what was read ahead).
size_t page_map_bytes(size_t file_bytes);

class SlowTier {
 public:
  virtual ~SlowTier() = default;
  // Stores rows [c * chunk_rows, (c + 1) * chunk_rows) of every head.
  // data: [heads][chunk_rows, row_bytes[s]]
  virtual void write_chunk(int64_t c, const uint8_t* data) = 0;
  // Head s's rows [row, row + n) (written before, in one chunk) into out. Thread-safe.
  virtual void read(int s, int64_t row, int64_t n, uint8_t* out) const = 0;
  // Where those rows can be read in place (in this process's memory), or null: then read() them.
  virtual const uint8_t* mapped(int /*s*/, int64_t /*row*/, int64_t /*n*/) const { return nullptr; }
  // Rows this close together are fetched in one read (see KvOffload::joins).
  virtual size_t join_gap_bytes() const { return 0; }
  // Head s's rows[0..n) (ascending, written) are about to be read: start reading those not in
  // memory now, all at once, rather than one page fault at a time.
  virtual void will_read(int /*s*/, const int32_t* /*rows*/, size_t /*n*/) const {}
  // The tier is a file (will_read and disk_read_bytes mean something).
  virtual bool on_disk() const { return false; }
  // Throws fasa::Error when the tier can no longer be trusted (its file deleted or shortened).
  virtual void check() const {}
  // Bytes of the tier's data the OS keeps cached in RAM (the file's page cache); 0 when unknown.
  virtual size_t page_cache_bytes() const { return 0; }
  // Bytes of pages will_read() asked the disk for so far (each once after its chunk was written).
  virtual uint64_t disk_read_bytes() const { return 0; }
  // The tier's own bookkeeping in RAM.
  virtual size_t ram_bytes() const { return 0; }
  virtual std::string describe() const = 0;
};

// A second allocation in RAM: the same code path as a file, without the disk.
std::unique_ptr<SlowTier> make_ram_tier(const SlowTierShape& shape);
// A temporary file in `dir` (removed with the tier) with room for shape.max_chunks chunks, each
// head's rows in a region of their own: a head's selected rows lie close together whatever their
// positions. Rows are read in place through a read-only mapping (a selected row costs a copy from
// the page cache, not a system call); where the mapping fails, by positioned reads (pread). The
// kernel's readahead is off (a step reads scattered rows); instead will_read() asks for the pages a
// step's rows lie on that were not asked for since their chunk was written, in runs, all in flight
// together. Each chunk is flushed to disk and dropped from the page cache once written, so writes
// do not fill the page cache; what the steps read back stays there (reclaimable; up to the whole
// file when steps select everywhere). A page the kernel evicts after it was asked for is read by a
// page fault again (POSIX_FADV_DONTNEED after sync_file_range; O_DIRECT would force 4 KiB-aligned
// reads of ~200-byte rows).
std::unique_ptr<SlowTier> make_file_tier(const std::string& dir, const SlowTierShape& shape);

// Pages [first, first + count) of a file to read ahead.
struct PageRun {
  size_t first, count;
};
// The runs of pages that rows at file offsets base + rows[i] * row_bytes (rows ascending) lie on,
// without pages already asked for (asked[page] != 0), joining runs at most join_pages apart (one
// larger read costs less than two small ones); marks the pages returned as asked and returns how many
// were not asked before.
size_t plan_page_runs(size_t base, const int32_t* rows, size_t n, size_t row_bytes, size_t page_bytes,
                    size_t join_pages, std::atomic<uint8_t>* asked, std::vector<PageRun>& runs);

}  // namespace fasa
