#include "cli/line_reader.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/interrupt.h"

#if FASA_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace fasa::cli {

#if FASA_HAVE_LIBEDIT
namespace {

// libedit's key reader (rl_getc_function): one character (UTF-8 decoded: libedit takes what this returns
// as one wide character), or EOF at the end of input or once Ctrl-C was pressed. SIGINT stays blocked
// but inside ppoll, so a Ctrl-C that came between the prompt and the wait (which a plain read() would
// miss, then wait for a key) ends the wait as one pressed during it does.
int read_key(FILE*) {
  sigset_t sigint, before;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, &before);
  sigset_t waiting = before;
  sigdelset(&waiting, SIGINT);
  unsigned char bytes[4];
  int have = 0, need = 1;
  while (have < need && !interrupt_pending()) {
    pollfd in = {STDIN_FILENO, POLLIN, 0};
    if (ppoll(&in, 1, nullptr, &waiting) < 0) {
      if (errno == EINTR) continue;  // (the loop's test reads the flag)
      break;
    }
    if (read(STDIN_FILENO, bytes + have, 1) != 1) break;
    if (have++ == 0) need = bytes[0] < 0xC0 ? 1 : bytes[0] < 0xE0 ? 2 : bytes[0] < 0xF0 ? 3 : 4;
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (have < need || interrupt_pending()) return EOF;
  if (need == 1) return bytes[0];
  int c = bytes[0] & (0x7F >> need);
  for (int i = 1; i < need; ++i) c = (c << 6) | (bytes[i] & 0x3F);
  return c;
}

}  // namespace
#endif

LineReader::LineReader() : terminal_(isatty(STDIN_FILENO)), editing_(false) {
#if FASA_HAVE_LIBEDIT
  editing_ = terminal_;
  if (!editing_) return;
  std::setlocale(LC_CTYPE, "");  // libedit reads multibyte (UTF-8) keys by the locale's character type
  // Ctrl-C at the prompt: fasa's own handler (cli/interrupt.cpp; no SA_RESTART) ends the read, rather
  // than libedit's, which would send SIGINT on to the whole process group.
  rl_catch_signals = 0;
  rl_getc_function = read_key;  // (before using_history(), which sets libedit up)
  using_history();
#endif
}

std::optional<std::string> LineReader::read(const char* prompt) {
#if FASA_HAVE_LIBEDIT
  if (editing_) {
    char* got = readline(prompt);
    if (!got || take_interrupt()) {
      std::free(got);
      return std::nullopt;
    }
    std::string line(got);
    std::free(got);
    if (!line.empty()) add_history(line.c_str());
    return line;
  }
#endif
  std::fputs(prompt, stdout);
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line) || take_interrupt()) return std::nullopt;
  return line;
}

}  // namespace fasa::cli
