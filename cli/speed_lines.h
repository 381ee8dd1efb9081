#pragma once
// The lines `fasa run` and `fasa chat` end with on stderr: model and policy, prompt and decode speed,
// KV memory.
#include <cstdint>
#include <string>

#include "fasa/fasa.h"

namespace fasa::cli {

// The tokens a generation evaluated after its prompt: the last one sampled is not, unless an end token
// came after it.
int64_t decoded_steps(const GenerationResult& r);

// decode_steps: the tokens evaluated after the prompt (what the decode time was spent on).
void print_speed_lines(const Engine& engine, const Context& ctx, const std::string& model, int64_t decode_steps);

}  // namespace fasa::cli
