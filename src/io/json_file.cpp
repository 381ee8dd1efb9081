#include "io/json_file.h"

#include <fstream>

#include "fasa/error.h"

namespace fasa {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  const std::string role = what.empty() ? "" : what + " ";
  std::ifstream in(path);
  if (!in) fail(path, "cannot open " + role + "file");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, role + "file is not valid JSON: " + e.what());
  }
}

}  // namespace fasa
