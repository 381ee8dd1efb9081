#pragma once
// A token budget: a count ("256") or a share of the current context ("0.1").
#include <cstdint>
#include <string>

namespace fasa {

struct Budget {
  double value = 0;
  bool fraction = false;
  // Rows to keep out of n (at least 1).
  int64_t tokens(int64_t n) const;
  std::string str() const;
  static Budget parse(const std::string& s);  // throws fasa::Error
};

}  // namespace fasa
