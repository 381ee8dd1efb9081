#pragma once
// FASA-M's storage for the offloaded heads' K_rest and V rows (the dims TIP does not score on).
// Appends go to a tail chunk in RAM (every offloaded head's rows of a run of positions); a finished
// chunk is written to the slow tier. A decode step fetches just the rows its heads selected: rows of
// the tail chunk from RAM, the rest from the slow tier, which is first asked to read them all ahead
// at once — or, with prefetch on, from buffers a background thread fills with the previous step's
// selection of the next layer while the current layer computes (consecutive steps select many of
// the same rows; the thread pays when it has a core of its own).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fasa/kv_memory.h"
#include "fasa/options.h"
#include "kv/slow_tier.h"

namespace fasa {

class KvOffload {
 public:
  static constexpr int64_t kMaxChunk = 256;  // positions per chunk (fewer for a shorter context)

  // record_bytes[s]: bytes of one row ([k_rest | v]) of offloaded head s; head_layer[s]: its layer
  // (ascending). prefetch_cap_bytes bounds the prefetch buffers (both layers in flight).
  KvOffload(const KvOffloadOptions& opts, int64_t n_ctx, std::vector<size_t> record_bytes, std::vector<int> head_layer,
            size_t prefetch_cap_bytes);
  // Positions per chunk for a context of n_ctx.
  static int64_t chunk_rows(int64_t n_ctx) { return n_ctx < kMaxChunk ? n_ctx : kMaxChunk; }
  int64_t chunk() const { return chunk_; }
  ~KvOffload();

  // Makes pos's chunk the tail, writing the previous one to the slow tier. Call before storing at
  // pos; not concurrently with anything else.
  void prepare(int64_t pos);
  // Where head s's row at pos (in the tail chunk) is stored.   [record_bytes[s]]
  uint8_t* tail_record(int s, int64_t pos) { return tail_.data() + head_offset_[s] + (size_t)(pos % chunk_) * record_bytes_[s]; }
  // Forgets the prefetch lists (rows >= n may be written again).
  void truncate(int64_t n);
  // A decode step starts layer `layer`'s attention: prefetch the next layer's previous selection
  // (at layer 0, this one's too).
  void begin_layer(int layer);
  // Head s's rows (ascending, all stored), each record split in two: its first first_bytes bytes
  // (K_rest) into first_out, the rest (V) into rest_out.
  // first_out: [n, first_bytes], rest_out: [n, record_bytes[s] - first_bytes]
  // `decode`: a decode step's selection, served from prefetch buffers and remembered for the next.
  void fetch(int s, const int32_t* rows, int64_t n, uint8_t* first_out, size_t first_bytes, uint8_t* rest_out,
             bool decode);

  size_t tail_bytes() const { return tail_.size(); }
  size_t slow_bytes() const { return written_chunks_ * tail_.size(); }
  size_t prefetch_buffer_bytes() const;
  KvFetchCounts counts() const;
  const SlowTier& tier() const { return *tier_; }

 private:
  struct Prefetched {
    std::vector<int32_t> rows;     // ascending
    std::vector<uint8_t> records;  // [rows.size(), record_bytes]
  };
  void prefetch_loop();
  // Reads layer's heads' previous selections into buffers_[parity]; returns the rows read.
  size_t prefetch_layer(int layer, int parity, int64_t tail_chunk);
  void wait_idle(std::unique_lock<std::mutex>& lock) const;
  // Whether head s's row b may join a read that ends with row a (same chunk, a small gap): through
  // system calls, reading a few unwanted bytes costs less than another call, and the disk reads
  // whole pages anyway; from memory, rows are copied one by one.
  bool joins(int s, int32_t a, int32_t b) const {
    return b / chunk_ == a / chunk_ && (size_t)(b - a - 1) * record_bytes_[s] <= tier_->join_gap_bytes();
  }
  // Asks the slow tier to start reading head s's rows[0..n) (ascending) outside chunk tail_chunk,
  // all at once, except those skip(j) says are served elsewhere.
  template <typename Skip>
  void read_ahead(int s, const int32_t* rows, int64_t n, int64_t tail_chunk, Skip&& skip) const;
  // Head s's rows[0..n) (ascending, one chunk, joined) from the slow tier in one read: calls
  // emit(j, record of rows[j]).
  template <typename Emit>
  void read_rows(int s, const int32_t* rows, int64_t n, Emit&& emit) const;

  int64_t chunk_;                            // positions per chunk
  std::unique_ptr<SlowTier> tier_;
  std::vector<size_t> record_bytes_;         // [slots]
  std::vector<size_t> head_offset_;          // [slots] byte offset of each head's rows in a chunk
  std::vector<int> head_layer_;              // [slots]
  std::vector<int> index_in_layer_;          // [slots] the head's place among its layer's
  std::vector<std::vector<int>> layer_slots_;  // [n_layer] offloaded heads of each layer
  std::vector<uint8_t> tail_;                // [chunk bytes] the chunk being appended to
  int64_t tail_chunk_ = -1;
  std::vector<char> written_;                // [chunks] chunk c is in the slow tier
  size_t written_chunks_ = 0;
  bool prefetch_;
  size_t prefetch_cap_rows_;                 // per head and layer in flight

  // Prefetch state. Buffers of layer l live in parity l % 2: the thread fills layer l+1's while
  // layer l's fetches read theirs.
  std::vector<std::vector<int32_t>> prev_rows_;  // [slots] the last decode step's selection
  std::vector<Prefetched> buffers_[2];           // [parity][index in layer]
  int64_t buffer_step_[2] = {-1, -1}, buffer_layer_[2] = {-1, -1};
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  int64_t step_ = 0;                   // decode steps begun
  int job_first_ = 0, job_last_ = 0;   // layers [first, last) of the pending job
  int64_t job_tail_chunk_ = -1;
  bool pending_ = false, busy_ = false, stop_ = false;
  std::string error_;                  // the prefetch thread's failure, rethrown by fetch
  // Prefetch pays only when consecutive steps select many of the same rows. A layer whose
  // prefetched rows are mostly unused is skipped, and tried again every kProbeEvery steps.
  struct LayerUse {
    uint64_t prefetched = 0, used = 0;
  };
  std::vector<LayerUse> use_;          // [n_layer] since the last probe
  static constexpr int64_t kProbeEvery = 16;
  static constexpr uint64_t kMinSample = 1024;  // rows prefetched before a layer can be judged
  std::atomic<uint64_t> n_tail_{0}, n_hits_{0}, n_misses_{0}, n_prefetched_{0};
  std::thread thread_;
};

}  // namespace fasa
