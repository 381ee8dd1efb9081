#pragma once
// Chat prompts without a Jinja engine: the common template families are recognised from the model's
// template text (Llama-3 headers, ChatML, Mistral/Llama-2 [INST], Phi-3, Gemma) and rendered here; a model with
// no template, or one we do not recognise, gets plain "role: content" lines (but a Gemma vocabulary's: its
// turns). A default system message that the template writes where the conversation has none (SmolLM2,
// Qwen2.5) is kept with the format.
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "fasa/chat.h"

namespace fasa {

enum class ChatFormat { Llama3, ChatML, Mistral, Phi3, Gemma, Plain };

ChatFormat detect_chat_format(std::string_view template_text);
const char* chat_format_name(ChatFormat f);

struct ChatStyle {
  ChatStyle(ChatFormat f = ChatFormat::Plain, std::string system = {}) : format(f), default_system(std::move(system)) {}
  ChatFormat format;
  std::string default_system;  // the system message the template writes when the conversation has none
};

// `has_gemma_turns`: the vocabulary has <start_of_turn> (used where the template is empty: Gemma's base
// models ship none, and llama.cpp's fallback, ChatML, has no tokens in their vocabulary).
ChatStyle chat_style(std::string_view template_text, bool has_gemma_turns);
struct Model;
ChatStyle chat_style(const Model& m);  // from its template and vocabulary
// For `fasa info`: "present, rendered as chatml with its default system message", "none (the vocabulary's gemma turns)", ...
std::string describe(const ChatStyle& style, bool has_template);

// The prompt for `messages`, ending where the assistant's reply begins. Special tokens are written
// as their text (tokenize it with special-token parsing); BOS is left to the tokenizer.
std::string render_chat(const ChatStyle& style, const std::vector<ChatMessage>& messages);

}  // namespace fasa
