#pragma once
// Chat prompts without a Jinja engine: the common template families are recognised from the model's
// template text (Llama-3 headers, ChatML, Mistral/Llama-2 [INST], Phi-3, Gemma) and rendered here; a model with
// no template, or one we do not recognise, gets plain "role: content" lines.
#include <string>
#include <string_view>
#include <vector>

#include "fasa/chat.h"

namespace fasa {

enum class ChatFormat { Llama3, ChatML, Mistral, Phi3, Gemma, Plain };

ChatFormat detect_chat_format(std::string_view template_text);
const char* chat_format_name(ChatFormat f);

// The prompt for `messages`, ending where the assistant's reply begins. Special tokens are written
// as their text (tokenize it with special-token parsing); BOS is left to the tokenizer.
std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages);

}  // namespace fasa
