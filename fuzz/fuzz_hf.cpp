// The Hugging Face directory loader on arbitrary config.json and model.safetensors (one input
// holds both, split at a "----" line): a model or a fasa::Error.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "fasa/error.h"
#include "fuzz_input.h"
#include "model/model.h"

namespace {

void put(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), (std::streamsize)bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/fasa-fuzz-hf-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    return std::string(tmpl);
  }();
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  put(dir + "/config.json", fasa::fuzz::next_part(rest));
  put(dir + "/model.safetensors", rest);
  try {
    fasa::load_hf_model(dir);
  } catch (const fasa::Error&) {
  }
  return 0;
}
