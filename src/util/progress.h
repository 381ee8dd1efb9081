#pragma once
// Progress with an ETA on stderr: a bar redrawn in place on a terminal, otherwise (a log, CI) a line
// every few seconds.
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
