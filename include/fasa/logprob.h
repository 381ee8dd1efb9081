#pragma once
// A token's log-probability, as the server's `logprobs` report it.
#include <cstdint>
#include <utility>
#include <vector>

namespace fasa {

// log softmax of the logits (the model's distribution, before any sampling setting) at the token, with
// the most likely tokens at its position.
struct TokenLogprob {
  int32_t id = 0;
  bool known = true;                            // false for the context's first token: nothing predicts it
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // [n] (token id, log-probability), most likely first
};

}  // namespace fasa
