#pragma once
// Reads a whole JSON file; a missing file or bad JSON is a fasa::Error naming the file.
#include <nlohmann/json.hpp>
#include <string>

#include "fasa/error.h"

namespace fasa {

// `what` names the file's role in the error ("profile", "tokenizer") — may be empty.
nlohmann::json read_json_file(const std::string& path, const std::string& what = "");

// Runs `parse`; a JSON field of an unexpected type (nlohmann's exceptions) becomes a fasa::Error
// naming `path`, so no reader has to check every field's type to stay safe.
template <class F>
auto with_json_errors(const std::string& path, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("unexpected JSON content: ") + e.what());
  }
}

}  // namespace fasa
