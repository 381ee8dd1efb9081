#pragma once
// The user's lines for `fasa chat`: on a terminal through libedit (Debian's libedit-dev), so cursor keys
// edit the line and up/down recall earlier turns; from a pipe a plain read of each line.
#include <optional>
#include <string>

namespace fasa::cli {

class LineReader {
 public:
  LineReader();
  // The next line without its newline, after showing `prompt` on a terminal; nothing at end of input
  // or when Ctrl-C was pressed at the prompt.
  std::optional<std::string> read(const char* prompt);
  bool terminal() const { return terminal_; }

 private:
  bool terminal_;  // standard input is a terminal
  bool editing_;   // ... and fasa was built with libedit
};

}  // namespace fasa::cli
