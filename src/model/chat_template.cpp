#include "model/chat_template.h"

#include "model/model.h"

namespace fasa {

namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string render_llama3(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + std::string(trim(m.content)) + "<|eot_id|>";
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

std::string render_chatml(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  return out + "<|im_start|>assistant\n";
}

// Llama-2 / Mistral: the system text is prefixed to the first user turn.
std::string render_mistral(const std::vector<ChatMessage>& messages) {
  std::string out, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.append(trim(m.content)).append("\n\n");
    } else if (m.role == "assistant") {
      out.append(" ").append(trim(m.content)).append("</s>");
    } else {
      out.append("[INST] ").append(system).append(trim(m.content)).append(" [/INST]");
      system.clear();
    }
  }
  return out;
}

// Gemma: turns of "user" and "model", the system text before the first user turn's.
std::string render_gemma(const std::vector<ChatMessage>& messages) {
  std::string out, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.append(trim(m.content)).append("\n\n");
      continue;
    }
    out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : m.role) + "\n" + system +
           std::string(trim(m.content)) + "<end_of_turn>\n";
    system.clear();
  }
  return out + "<start_of_turn>model\n";
}

// Phi-3: <|role|> on its own line, the content, <|end|>; the reply starts after "<|assistant|>\n".
std::string render_phi3(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  return out + "<|assistant|>\n";
}

std::string render_plain(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant:";
}

}  // namespace

ChatFormat detect_chat_format(std::string_view t) {
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::Llama3;
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatFormat::ChatML;
  if (t.find("[INST]") != std::string_view::npos) return ChatFormat::Mistral;
  if (t.find("<start_of_turn>") != std::string_view::npos) return ChatFormat::Gemma;
  if (t.find("<|user|>") != std::string_view::npos && t.find("<|end|>") != std::string_view::npos) return ChatFormat::Phi3;
  return ChatFormat::Plain;
}

// ChatML templates that open with a fixed system turn unless the first message is one:
//   {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nTEXT<|im_end|>\n' }}
static std::string chatml_default_system(std::string_view t) {
  const std::string_view open = "<|im_start|>system\n";
  if (t.find("!= 'system'") == std::string_view::npos && t.find("!= \"system\"") == std::string_view::npos) return {};
  const size_t at = t.find(open);
  if (at == std::string_view::npos) return {};
  const size_t end = t.find("<|im_end|>", at);
  if (end == std::string_view::npos) return {};
  const std::string_view text = t.substr(at + open.size(), end - at - open.size());
  if (text.find_first_of("{}'\"") != std::string_view::npos) return {};  // not a literal
  return std::string(text);
}

ChatStyle chat_style(std::string_view t, bool has_gemma_turns) {
  if (t.empty()) return {has_gemma_turns ? ChatFormat::Gemma : ChatFormat::Plain, {}};
  const ChatFormat f = detect_chat_format(t);
  return {f, f == ChatFormat::ChatML ? chatml_default_system(t) : std::string()};
}

ChatStyle chat_style(const Model& m) {
  const std::vector<int32_t> turn = m.tokenizer.encode("<start_of_turn>", false, true);
  return chat_style(m.chat_template, turn.size() == 1 && m.tokenizer.type(turn[0]) == TokenType::Control);
}

std::string describe(const ChatStyle& style, bool has_template) {
  if (!has_template)
    return style.format == ChatFormat::Plain ? "none (chat prompts use plain role: content lines)"
                                             : std::string("none (the vocabulary's ") + chat_format_name(style.format) + " turns)";
  std::string out = std::string("present, rendered as ") + chat_format_name(style.format);
  if (!style.default_system.empty()) out += " with its default system message";
  return out;
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Mistral: return "mistral";
    case ChatFormat::Phi3: return "phi3";
    case ChatFormat::Gemma: return "gemma";
    case ChatFormat::Plain: return "plain";
  }
  return "?";
}

std::string render_chat(const ChatStyle& style, const std::vector<ChatMessage>& given) {
  std::vector<ChatMessage> with_system;
  if (!style.default_system.empty() && (given.empty() || given.front().role != "system")) {
    with_system.push_back({"system", style.default_system});
    with_system.insert(with_system.end(), given.begin(), given.end());
  }
  const std::vector<ChatMessage>& messages = with_system.empty() ? given : with_system;
  switch (style.format) {
    case ChatFormat::Llama3: return render_llama3(messages);
    case ChatFormat::ChatML: return render_chatml(messages);
    case ChatFormat::Mistral: return render_mistral(messages);
    case ChatFormat::Phi3: return render_phi3(messages);
    case ChatFormat::Gemma: return render_gemma(messages);
    case ChatFormat::Plain: break;
  }
  return render_plain(messages);
}

}  // namespace fasa
