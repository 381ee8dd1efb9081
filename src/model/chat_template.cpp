#include "model/chat_template.h"

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

std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages) {
  switch (f) {
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
