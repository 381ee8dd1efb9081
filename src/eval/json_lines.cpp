#include "eval/json_lines.h"

#include <fstream>

#include "fasa/error.h"

namespace fasa {

void fail_line(const std::string& path, int line, const std::string& message) {
  fail(path, "line " + std::to_string(line) + ": " + message);
}

void for_each_json_line(const std::string& path, const std::string& what,
                        const std::function<void(const nlohmann::json& object, int line)>& each) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open " + what);
  bool any = false;
  std::string text;
  for (int ln = 1; std::getline(in, text); ++ln) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail_line(path, ln, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object()) fail_line(path, ln, "not a JSON object");
    each(j, ln);
    any = true;
  }
  if (!any) fail(path, "no " + what);
}

std::string string_field(const nlohmann::json& object, const char* key, const std::string& path, int line) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) fail_line(path, line, std::string("missing string field '") + key + "'");
  return it->get<std::string>();
}

std::string line_id(const nlohmann::json& object, int line) {
  const auto it = object.find("id");
  return it == object.end() ? std::to_string(line) : it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace fasa
