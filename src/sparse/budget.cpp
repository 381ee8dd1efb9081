#include "sparse/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "fasa/error.h"

namespace fasa {

int64_t Budget::tokens(int64_t n) const {
  const double t = fraction ? std::ceil(value * (double)n) : value;
  return std::max<int64_t>(1, (int64_t)std::min<double>(t, (double)INT64_MAX / 2));
}

std::string Budget::str() const {
  if (!fraction) return std::to_string((int64_t)value);
  std::string s = std::to_string(value);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s += '0';  // 1.0 stays a fraction when parsed again
  return s;
}

Budget Budget::parse(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0)
    throw Error("--budget must be a positive token count or a fraction in (0, 1], got '" + s + "'");
  // "1.0" is the whole context (a fraction, as JSON writes a float 1), "1" one token.
  if (v < 1 || (v == 1 && s.find('.') != std::string::npos)) return {v, true};
  if (v != std::floor(v) || v > 1e12) throw Error("--budget: a count must be a whole number, got '" + s + "'");
  return {v, false};
}

}  // namespace fasa
