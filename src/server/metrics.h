#pragma once
// Server counters, rendered as Prometheus text for GET /metrics.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace fasa {

class ServerMetrics {
 public:
  void count_response(int status) {
    std::lock_guard lock(mu_);
    ++responses_[status];
  }
  void count_generation(int64_t prompt_tokens, int64_t generated, double prompt_s, double decode_s, uint64_t kv_bytes,
                        bool cancelled) {
    std::lock_guard lock(mu_);
    kv_bytes_read_ += kv_bytes;
    prompt_tokens_ += prompt_tokens;
    generated_tokens_ += generated;
    prompt_seconds_ += prompt_s;
    decode_seconds_ += decode_s;
    cancelled_ += cancelled;
  }
  // `active`, `waiting`: the admission gate's gauges now; `batch`: the generations in the scheduler's
  // forward passes, `prefilling`: their prompt tokens still to feed.
  std::string render(int active, int waiting, int batch, int64_t prefilling) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> responses_;  // HTTP status -> count
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0;
  uint64_t kv_bytes_read_ = 0;  // by the generations' contexts (ContextStats::kv_bytes_read)
  double prompt_seconds_ = 0, decode_seconds_ = 0;
};

}  // namespace fasa
