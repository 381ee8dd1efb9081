#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace fasa {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (tty_) std::fputc('\n', stderr);
}

void ProgressBar::advance(int64_t n) {
  done_ += n;
  const auto now = std::chrono::steady_clock::now();
  // A terminal gets a bar redrawn in place; a log file or pipe a line every few seconds.
  const auto period = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if ((done_ < total_ || !tty_) && now - last_draw_ < period) return;
  last_draw_ = now;
  const double frac = (double)done_ / (double)total_;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  if (!tty_) {
    std::fprintf(stderr, "%s: %3d%% (%lld of %lld), %.0fs elapsed, ETA %.0fs\n", label_.c_str(), (int)(frac * 100),
                 (long long)done_, (long long)total_, elapsed, eta);
    return;
  }
  constexpr int kWidth = 30;
  std::string bar(kWidth, ' ');
  for (int i = 0; i < (int)(frac * kWidth); ++i) bar[i] = '=';
  std::fprintf(stderr, "\r%s [%s] %3d%%  %.0fs elapsed, ETA %.0fs ", label_.c_str(), bar.c_str(), (int)(frac * 100),
               elapsed, eta);
  std::fflush(stderr);
}

}  // namespace fasa
