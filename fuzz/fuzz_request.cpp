// The server's request parser on arbitrary bodies, for every endpoint: a request or a BadRequest.
#include "server/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (fasa::Endpoint endpoint : {fasa::Endpoint::completions, fasa::Endpoint::chat, fasa::Endpoint::llama_completion}) {
    try {
      fasa::parse_completion_request(body, endpoint, fasa::RequestDefaults{}, fasa::PolicyOptions{});
    } catch (const fasa::BadRequest&) {
    }
  }
  return 0;
}
