#pragma once
// The server's gate and its slots: at most `slots` generations run at once, each on a slot of its own;
// at most `max_waiting` more wait for one; a request beyond that is turned away at once (503) instead
// of queueing without bound.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace fasa {

class Admission {
 public:
  Admission(int slots, int max_waiting) : busy_(slots, false), max_waiting_(max_waiting) {}

  // Blocks until a slot is free and takes the free one `affinity` scores highest (the slot whose cached
  // prompt shares the most with this one); -1 (without waiting) when the queue is already full.
  // `affinity` is called under the gate's lock, on free slots only.
  int enter(const std::function<int64_t(int slot)>& affinity) {
    std::unique_lock lock(mu_);
    if (active_ == (int)busy_.size() && waiting_ >= max_waiting_) return -1;
    ++waiting_;
    cv_.wait(lock, [&] { return active_ < (int)busy_.size(); });
    --waiting_;
    int best = -1;
    int64_t best_score = 0;
    for (int s = 0; s < (int)busy_.size(); ++s) {
      if (busy_[s]) continue;
      const int64_t score = affinity ? affinity(s) : 0;
      if (best < 0 || score > best_score) best = s, best_score = score;
    }
    busy_[best] = true;
    ++active_;
    return best;
  }
  void leave(int slot) {
    {
      std::lock_guard lock(mu_);
      busy_[slot] = false;
      --active_;
    }
    cv_.notify_one();
  }
  int active() const { std::lock_guard lock(mu_); return active_; }
  int waiting() const { std::lock_guard lock(mu_); return waiting_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> busy_;  // [slots]
  int max_waiting_;
  int waiting_ = 0;
  int active_ = 0;
};

}  // namespace fasa
