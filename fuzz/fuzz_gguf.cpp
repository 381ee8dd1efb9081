// The GGUF reader and the whole GGUF model loader (metadata, tensor table, hyper-parameters,
// tokenizer) on arbitrary bytes: a model or a fasa::Error, nothing else.
#include "fasa/error.h"
#include "fuzz_input.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fasa::fuzz::MemFile file("fuzz.gguf");
  const std::string path = file.write({reinterpret_cast<const char*>(data), size});
  try {
    auto model = fasa::load_gguf_model(path);
    model->tokenizer.encode("In the beginning <s> \xF0\x9F\x98\x80", true, true);
  } catch (const fasa::Error&) {
  }
  return 0;
}
