#pragma once
// A one-line progress bar with ETA on stderr, drawn only when stderr is a terminal.
#include <chrono>
#include <cstdint>
#include <string>

namespace fasa {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // finishes the line
  void advance(int64_t n = 1);

 private:
  std::string label_;
  int64_t total_, done_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace fasa
