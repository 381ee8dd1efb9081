#include "sparse/policy.h"

#include "util/error.h"

namespace fasa {

std::vector<std::string> selector_names() { return {"full"}; }

std::unique_ptr<TokenSelector> make_selector(const std::string& name) {
  if (name == "full") return std::make_unique<FullAttention>();
  std::string known;
  for (auto& n : selector_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown attention policy '" + name + "' (known: " + known + ")");
}

}  // namespace fasa
