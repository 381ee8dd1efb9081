#pragma once
// Next-token choice: greedy at temperature 0, otherwise top-k -> temperature -> top-p, seeded.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "fasa/logprob.h"
#include "fasa/options.h"

namespace fasa {

class Sampler {
 public:
  explicit Sampler(SamplerOptions opts);
  int32_t sample(std::span<const float> logits);

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
  std::vector<float> weight_;        // [n_vocab] e^((logit - max) / temperature), kept between calls
  std::vector<int32_t> candidates_;  // the tokens that can be drawn
};

// Index of the largest logit (the lowest index on ties).
int32_t argmax(std::span<const float> logits);

// log softmax(logits)[id], and the top_n most likely tokens with theirs.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int top_n);

}  // namespace fasa
