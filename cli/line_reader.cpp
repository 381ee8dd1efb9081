#include "cli/line_reader.h"

#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/interrupt.h"

#if FASA_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace fasa::cli {

LineReader::LineReader() : terminal_(isatty(STDIN_FILENO)), editing_(false) {
#if FASA_HAVE_LIBEDIT
  editing_ = terminal_;
  if (!editing_) return;
  std::setlocale(LC_CTYPE, "");  // libedit reads multibyte (UTF-8) keys by the locale's character type
  // Ctrl-C at the prompt: fasa's own handler (cli/interrupt.cpp; no SA_RESTART) ends the read, rather
  // than libedit's, which would send SIGINT on to the whole process group.
  rl_catch_signals = 0;
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
