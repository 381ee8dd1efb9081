#pragma once
// Reads a whole JSON file; a missing file or bad JSON is a fasa::Error naming the file.
#include <nlohmann/json.hpp>
#include <string>

namespace fasa {

// `what` names the file's role in the error ("profile", "tokenizer") — may be empty.
nlohmann::json read_json_file(const std::string& path, const std::string& what = "");

}  // namespace fasa
