#pragma once
// Turns the text of sampled tokens into the pieces a caller sees: whole UTF-8 characters only, text
// that might be the start of a stop string held back until it is known not to be, and the cut at
// the first stop string.
#include <string>
#include <string_view>
#include <vector>

namespace fasa {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop);
  // Adds one token's text; returns the text that can now be released (maybe empty). When a stop
  // string appears, releases the text before it and sets stopped().
  std::string push(std::string_view token_text);
  // The held-back rest, at the end of a generation.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string text_;     // everything generated so far (cut at the stop string)
  size_t released_ = 0;  // bytes of text_ already released
  bool stopped_ = false;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t complete_utf8_prefix(std::string_view s);

}  // namespace fasa
