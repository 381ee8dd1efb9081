#pragma once
// Evaluation inputs as JSON lines (retrieval tasks, multiple-choice items): each non-blank line one
// object, read with errors that name the file and the line.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace fasa {

// Calls `each(object, line)` for every non-blank line of `path`, in order. Throws fasa::Error naming
// the file: unreadable, a line that is not a JSON object, or (`what` says what was expected) no line.
void for_each_json_line(const std::string& path, const std::string& what,
                        const std::function<void(const nlohmann::json& object, int line)>& each);

// The string field `key` of a line's object; throws fasa::Error naming the file and line where it is missing.
std::string string_field(const nlohmann::json& object, const char* key, const std::string& path, int line);
// The line's "id" (a string, or any other JSON value as its text), or the line number.
std::string line_id(const nlohmann::json& object, int line);
// fasa::Error "PATH: line N: MESSAGE".
[[noreturn]] void fail_line(const std::string& path, int line, const std::string& message);

}  // namespace fasa
