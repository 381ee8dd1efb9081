#pragma once
// One exception type for every user-facing failure: a bad file, a bad option, an unsupported model.
// Messages name the file (or option) first, then the problem, so the CLI can print them as they are.
#include <stdexcept>
#include <string>

namespace fasa {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "PATH: problem"
[[noreturn]] inline void fail(const std::string& path, const std::string& problem) {
  throw Error(path + ": " + problem);
}

}  // namespace fasa
