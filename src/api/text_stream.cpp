#include "api/text_stream.h"

#include <algorithm>

namespace fasa {

size_t complete_utf8_prefix(std::string_view s) {
  size_t i = s.size();
  for (int back = 0; back < 4 && i > 0; ++back) {
    const unsigned char c = s[i - 1];
    if ((c & 0xC0) != 0x80) {  // a lead or ASCII byte: is its sequence complete?
      const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      return (s.size() - (i - 1) >= need) ? s.size() : i - 1;
    }
    --i;
  }
  return s.size();
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

std::string TextStream::push(std::string_view token_text) {
  if (stopped_) return {};
  text_ += token_text;
  // A stop string can only end in the new text, so it starts at most max_stop_ bytes before it.
  const size_t from = text_.size() > token_text.size() + max_stop_ ? text_.size() - token_text.size() - max_stop_ : 0;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, text_.find(s, from));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    return finish();
  }
  size_t hold = 0;  // longest tail of the text that is a proper prefix of a stop string
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  const size_t end = std::min(complete_utf8_prefix(text_), text_.size() - hold);
  if (end <= released_) return {};
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string TextStream::finish() {
  std::string out = text_.substr(std::min(released_, text_.size()));
  released_ = text_.size();
  return out;
}

}  // namespace fasa
