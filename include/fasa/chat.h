#pragma once
// One message of a chat, as the API and the chat templates (src/model/chat_template.h) take it.
#include <string>

namespace fasa {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

}  // namespace fasa
