#pragma once
// `fasa chat` and `fasa run -cnv`: a conversation in the model's chat format, as llama-cli holds one.
#include <cstdint>
#include <string>

#include "fasa/fasa.h"

namespace fasa::cli {

struct ChatOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string system_prompt;    // -sys
  std::string first_message;    // -p / -f: the first user turn, before any read from standard input
  bool has_first_message = false;
  int64_t n_ctx = -1;           // -1: 4096, at most the model's; 0: the model's
  int n_predict = -1;           // tokens per reply; -1: until an end token (a plain model: the line's end, 256 at most)
  int threads = 0;
  bool single_turn = false;     // -st: one reply, then exit
  EngineOptions engine;         // -ngl, --device
  PolicyOptions policy;
  SamplerOptions sampling;
  bool seed_given = false;
};

// Reads the user's turns a line at a time from standard input ("> " on a terminal, where the line can be
// edited and earlier turns recalled (cli/line_reader.h); on a pipe each line is echoed after "> " so the
// output reads as the conversation) until end of input, `/exit`, or
// Ctrl-C at the prompt; Ctrl-C during a reply ends that reply only. Each turn prefills only what the
// context does not hold yet; when the conversation outgrows the context its oldest turns are dropped,
// with a note. Speeds go to stderr at the end.
int chat(ChatOptions o);

}  // namespace fasa::cli
