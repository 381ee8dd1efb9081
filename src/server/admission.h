#pragma once
// The server's gate: at most `slots` generations run at once, at most `max_waiting` more wait for a
// slot; a request beyond that is turned away at once (503) instead of queueing without bound.
#include <condition_variable>
#include <mutex>

namespace fasa {

class Admission {
 public:
  Admission(int slots, int max_waiting) : free_(slots), max_waiting_(max_waiting) {}

  // Blocks until a slot is free; false (without waiting) when the queue is already full.
  bool enter() {
    std::unique_lock lock(mu_);
    if (free_ == 0 && waiting_ >= max_waiting_) return false;
    ++waiting_;
    cv_.wait(lock, [&] { return free_ > 0; });
    --waiting_;
    --free_;
    ++active_;
    return true;
  }
  void leave() {
    {
      std::lock_guard lock(mu_);
      ++free_;
      --active_;
    }
    cv_.notify_one();
  }
  int active() const { std::lock_guard lock(mu_); return active_; }
  int waiting() const { std::lock_guard lock(mu_); return waiting_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int free_;
  int max_waiting_;
  int waiting_ = 0;
  int active_ = 0;
};

}  // namespace fasa
