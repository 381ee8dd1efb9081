#include "kv/kv_offload.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "fasa/error.h"

namespace fasa {

namespace {

// Selected rows are scattered over the slow tier's memory: each costs a trip to DRAM unless the
// cache is asked for it a few rows ahead of the copy. Asks for head s's rows up to kRowsAhead past
// row j (those not in chunk tail_chunk, mapped by the tier), from `touched` on; advances `touched`.
inline void touch_rows_ahead(const SlowTier& tier, int s, const int32_t* rows, int64_t n, int64_t j, int64_t chunk,
                             int64_t tail_chunk, size_t rb, int64_t& touched) {
  constexpr int64_t kRowsAhead = 16;
  for (touched = std::max(touched, j); touched < std::min(n, j + kRowsAhead); ++touched)
    if (rows[touched] / chunk != tail_chunk)
      if (const uint8_t* p = tier.mapped(s, rows[touched], 1)) {
        for (size_t b = 0; b < rb; b += 64) __builtin_prefetch(p + b);
        __builtin_prefetch(p + rb - 1);
      }
}

}  // namespace

KvOffload::KvOffload(const KvOffloadOptions& opts, int64_t n_ctx, std::vector<size_t> record_bytes,
                     std::vector<int> head_layer, size_t prefetch_cap_bytes)
    : chunk_(chunk_rows(n_ctx)),
      record_bytes_(std::move(record_bytes)), head_layer_(std::move(head_layer)), prefetch_(opts.prefetch) {
  const size_t slots = record_bytes_.size();
  const SlowTierShape shape{record_bytes_, chunk_, (n_ctx + chunk_ - 1) / chunk_};
  head_offset_ = shape.head_offsets();
  size_t max_layer_row = 0;
  for (size_t s = 0; s < slots; ++s) {
    if (layer_slots_.size() <= (size_t)head_layer_[s]) layer_slots_.resize(head_layer_[s] + 1);
    index_in_layer_.push_back((int)layer_slots_[head_layer_[s]].size());
    layer_slots_[head_layer_[s]].push_back((int)s);
  }
  size_t max_heads = 0;
  for (auto& l : layer_slots_) {
    size_t row = 0;
    for (int s : l) row += record_bytes_[s];
    max_layer_row = std::max(max_layer_row, row);
    max_heads = std::max(max_heads, l.size());
  }
  prefetch_cap_rows_ = max_layer_row ? prefetch_cap_bytes / (2 * max_layer_row) : 0;
  tier_ = opts.tier == KvOffloadOptions::Tier::File ? make_file_tier(opts.dir, shape) : make_ram_tier(shape);
  tail_.assign(shape.chunk_bytes(), 0);
  prev_rows_.resize(slots);
  use_.resize(layer_slots_.size());
  buffers_[0].resize(max_heads);
  buffers_[1].resize(max_heads);
  if (prefetch_) thread_ = std::thread([this] { prefetch_loop(); });
}

KvOffload::~KvOffload() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvOffload::wait_idle(std::unique_lock<std::mutex>& lock) const {
  cv_.wait(lock, [&] { return !pending_ && !busy_; });
}

void KvOffload::prepare(int64_t pos) {
  const int64_t c = pos / chunk_;
  if (c == tail_chunk_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);  // the prefetch thread reads the slow tier chunks by the tail's number
  if (tail_chunk_ >= 0) {
    tier_->write_chunk(tail_chunk_, tail_.data());
    if ((size_t)tail_chunk_ >= written_.size()) written_.resize(tail_chunk_ + 1, 0);
    written_chunks_ += !written_[tail_chunk_];
    written_[tail_chunk_] = 1;
  }
  if ((size_t)c < written_.size() && written_[c])
    for (size_t s = 0; s < record_bytes_.size(); ++s) tier_->read((int)s, c * chunk_, chunk_, tail_.data() + head_offset_[s]);
  else std::fill(tail_.begin(), tail_.end(), 0);
  tail_chunk_ = c;
}

void KvOffload::truncate(int64_t /*n*/) {  // rows >= n are never selected until written again
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  for (auto& r : prev_rows_) r.clear();
  buffer_step_[0] = buffer_step_[1] = -1;
}

void KvOffload::begin_layer(int layer) {
  if (!prefetch_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  if (layer == 0) ++step_;
  job_first_ = layer == 0 ? 0 : layer + 1;
  job_last_ = std::min<int>(layer + 2, (int)layer_slots_.size());
  if (job_first_ >= job_last_) return;
  job_tail_chunk_ = tail_chunk_;
  pending_ = true;
  cv_.notify_all();
}

void KvOffload::prefetch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return pending_ || stop_; });
    if (stop_) return;
    pending_ = false;
    busy_ = true;
    const int first = job_first_, last = job_last_;
    const int64_t step = step_, tail_chunk = job_tail_chunk_;
    for (int l = first; l < last; ++l) {
      buffer_step_[l % 2] = -1;
      LayerUse& u = use_[l];
      if (step % kProbeEvery == 0) u = {};
      else if (u.prefetched >= kMinSample && u.used * 4 < u.prefetched) continue;  // mostly unused: skip
      lock.unlock();
      std::string failure;
      size_t rows = 0;
      try {
        rows = prefetch_layer(l, l % 2, tail_chunk);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      lock.lock();
      u.prefetched += rows;
      if (!failure.empty() && error_.empty()) error_ = failure;
      buffer_step_[l % 2] = step, buffer_layer_[l % 2] = l;
      cv_.notify_all();
    }
    busy_ = false;
    cv_.notify_all();
  }
}

size_t KvOffload::prefetch_layer(int layer, int parity, int64_t tail_chunk) {
  tier_->check();  // before reading through the file's mapping
  size_t total = 0;
  for (int s : layer_slots_[layer]) {
    Prefetched& b = buffers_[parity][index_in_layer_[s]];
    b.rows.clear();
    for (int32_t r : prev_rows_[s]) {
      if (b.rows.size() >= prefetch_cap_rows_) break;
      if (r / chunk_ != tail_chunk) b.rows.push_back(r);
    }
    const size_t rb = record_bytes_[s];
    b.records.resize(b.rows.size() * rb);
    read_ahead(s, b.rows.data(), (int64_t)b.rows.size(), tail_chunk, [](int64_t) { return false; });
    for (size_t j = 0; j < b.rows.size();) {
      size_t e = j + 1;
      while (e < b.rows.size() && joins(s, b.rows[e - 1], b.rows[e])) ++e;
      read_rows(s, &b.rows[j], (int64_t)(e - j),
                [&](int64_t i, const uint8_t* rec) { std::memcpy(&b.records[(j + i) * rb], rec, rb); });
      j = e;
    }
    n_prefetched_ += b.rows.size();
    total += b.rows.size();
  }
  return total;
}

template <typename Skip>
void KvOffload::read_ahead(int s, const int32_t* rows, int64_t n, int64_t tail_chunk, Skip&& skip) const {
  if (!tier_->on_disk()) return;  // in RAM already
  thread_local std::vector<int32_t> ahead;  // [rows to read]
  ahead.clear();
  for (int64_t j = 0; j < n; ++j)
    if (rows[j] / chunk_ != tail_chunk && !skip(j)) ahead.push_back(rows[j]);
  if (!ahead.empty()) tier_->will_read(s, ahead.data(), ahead.size());
}

template <typename Emit>
void KvOffload::read_rows(int s, const int32_t* rows, int64_t n, Emit&& emit) const {
  const size_t rb = record_bytes_[s];
  const int64_t span = rows[n - 1] - rows[0] + 1;
  const uint8_t* base = tier_->mapped(s, rows[0], span);
  thread_local std::vector<uint8_t> buf;  // [span rows] when the tier is not in our address space
  if (!base) {
    buf.resize((size_t)span * rb);
    tier_->read(s, rows[0], span, buf.data());
    base = buf.data();
  }
  for (int64_t j = 0; j < n; ++j) emit(j, base + (size_t)(rows[j] - rows[0]) * rb);
}

void KvOffload::fetch(int s, const int32_t* rows, int64_t n, uint8_t* first_out, size_t first_bytes, uint8_t* rest_out,
                      bool decode) {
  const size_t rb = record_bytes_[s], rest_bytes = rb - first_bytes;
  auto emit = [&](int64_t j, const uint8_t* rec) {
    if (first_bytes) std::memcpy(first_out + j * first_bytes, rec, first_bytes);
    std::memcpy(rest_out + j * rest_bytes, rec + first_bytes, rest_bytes);
  };
  const Prefetched* pf = nullptr;
  if (decode && prefetch_) {
    const int layer = head_layer_[s], parity = layer % 2;
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] {
      return (!pending_ && !busy_) || (buffer_step_[parity] == step_ && buffer_layer_[parity] == layer);
    });
    if (!error_.empty()) throw Error(error_);
    if (buffer_step_[parity] == step_ && buffer_layer_[parity] == layer) pf = &buffers_[parity][index_in_layer_[s]];
  }
  tier_->check();
  uint64_t tail = 0, hits = 0, misses = 0;
  size_t k = 0;  // position in pf->rows, which ascend like rows
  auto prefetched = [&](int32_t r, size_t& at) {
    if (!pf) return false;
    while (at < pf->rows.size() && pf->rows[at] < r) ++at;
    return at < pf->rows.size() && pf->rows[at] == r;
  };
  size_t ahead_k = 0;
  read_ahead(s, rows, n, tail_chunk_, [&](int64_t j) { return prefetched(rows[j], ahead_k); });
  int64_t touched = 0;
  for (int64_t j = 0; j < n;) {
    touch_rows_ahead(*tier_, s, rows, n, j, chunk_, tail_chunk_, rb, touched);
    const int32_t r = rows[j];
    if (r / chunk_ == tail_chunk_) {
      emit(j, tail_.data() + head_offset_[s] + (size_t)(r % chunk_) * rb);
      ++tail, ++j;
    } else if (prefetched(r, k)) {
      emit(j, pf->records.data() + k * rb);
      ++hits, ++j;
    } else {  // missed rows close together in one chunk: one read
      int64_t e = j + 1;
      size_t kk = k;
      while (e < n && joins(s, rows[e - 1], rows[e]) && !prefetched(rows[e], kk)) ++e;  // same chunk: not the tail
      read_rows(s, rows + j, e - j, [&](int64_t i, const uint8_t* rec) { emit(j + i, rec); });
      misses += e - j;
      j = e;
    }
  }
  n_tail_ += tail, n_hits_ += hits, n_misses_ += misses;
  if (pf) {
    std::lock_guard<std::mutex> lock(mutex_);
    use_[head_layer_[s]].used += hits;
  }
  if (decode && prefetch_) prev_rows_[s].assign(rows, rows + n);
}

size_t KvOffload::prefetch_buffer_bytes() const {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  size_t b = 0;
  for (auto& parity : buffers_)
    for (auto& p : parity) b += p.records.capacity() + p.rows.capacity() * sizeof(int32_t);
  for (auto& r : prev_rows_) b += r.capacity() * sizeof(int32_t);
  return b;
}

KvFetchCounts KvOffload::counts() const {
  return {n_tail_.load(), n_hits_.load(), n_misses_.load(), n_prefetched_.load(), tier_->disk_read_bytes(),
          tier_->on_disk()};
}

}  // namespace fasa
