#include "cli/interrupt.h"

#include <pthread.h>

#include <atomic>
#include <csignal>

namespace fasa::cli {

namespace {
std::atomic<int> pressed{0};  // lock-free: safe in a signal handler
static_assert(std::atomic<int>::is_always_lock_free);
pthread_t main_thread;

void on_interrupt(int) {
  if (!pthread_equal(pthread_self(), main_thread)) {  // a worker took it: the thread that reads input must
    pthread_kill(main_thread, SIGINT);
    return;
  }
  if (pressed) {  // the first one not taken yet: the user insists
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
  pressed = 1;
}
}  // namespace

void catch_interrupts() {
  main_thread = pthread_self();
  struct sigaction sa = {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read of a line returns
  sigaction(SIGINT, &sa, nullptr);
}

bool take_interrupt() { return pressed.exchange(0) != 0; }

bool interrupt_pending() { return pressed != 0; }

}  // namespace fasa::cli
