#pragma once
// One generation in progress: what Context::generate and Batch share (its sampler, the text stream
// that holds back stop strings, the result so far).
#include <chrono>
#include <string>

#include "api/text_stream.h"
#include "fasa/fasa.h"
#include "model/sampler.h"

namespace fasa {

// What a generation refuses to start with: nothing fed (`fed` false) or max_tokens < 0.
inline void check_generation(const GenerationOptions& opts, bool fed) {
  if (!fed) throw Error("generate: feed a prompt first");
  if (opts.max_tokens < 0) throw Error("generate: max_tokens must be >= 0");
}

struct Context::Generation {
  GenerationOptions opts;
  TextCallback on_text;
  Sampler sampler;
  TextStream stream;
  GenerationResult r;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  Generation(const GenerationOptions& o, const TextCallback& cb)
      : opts(o), on_text(cb), sampler(o.sampling), stream(o.stop) {}
  bool emit(const std::string& piece) {
    if (piece.empty()) return true;
    r.text += piece;
    return !on_text || on_text(piece);
  }
};

}  // namespace fasa
