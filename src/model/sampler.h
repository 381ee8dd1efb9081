#pragma once
// Next-token choice: greedy at temperature 0, otherwise top-k -> temperature -> top-p, seeded.
#include <cstdint>
#include <random>
#include <span>

#include "fasa/options.h"

namespace fasa {

class Sampler {
 public:
  explicit Sampler(SamplerOptions opts);
  int32_t sample(std::span<const float> logits);

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
};

// Index of the largest logit (the lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace fasa
