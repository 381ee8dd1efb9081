#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "fasa/error.h"
#include "ops/elementwise.h"

namespace fasa {

Sampler::Sampler(SamplerOptions opts) : opts_(opts), rng_(opts.seed) {
  if (!(opts.temperature >= 0) || !std::isfinite(opts.temperature)) throw Error("temperature must be >= 0");
  if (opts.top_k < 0) throw Error("top_k must be >= 0");
  if (!(opts.top_p > 0 && opts.top_p <= 1)) throw Error("top_p must be in (0, 1]");
}

int32_t argmax(std::span<const float> logits) {
  return (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int top_n) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp((double)(x - max));
  const float log_z = max + (float)std::log(sum);
  TokenLogprob t{id, true, logits[id] - log_z, {}};
  const int n = (int)logits.size(), k = std::clamp(top_n, 0, n);
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int i = 0; i < k; ++i) t.top.emplace_back(idx[i], logits[idx[i]] - log_z);
  return t;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opts_.temperature == 0.0f) return argmax(logits);
  const int n = (int)logits.size();
  const float max = *std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(max)) return argmax(logits);
  // Each token's weight e^((logit - max) / T), for the whole vocabulary at once (exp_fast vectorises:
  // a 128K vocabulary's std::exp and full sort took longer than a small model's decode step). Tokens
  // under e^-40 of the top are left out: all of a vocabulary's together stay below 1e-12 of the mass.
  constexpr float kNegligible = 4.2e-18f;  // e^-40
  weight_.resize(n);
  const float inv_t = 1.0f / opts_.temperature;
  for (int i = 0; i < n; ++i) weight_[i] = exp_fast((logits[i] - max) * inv_t);
  candidates_.clear();
  for (int i = 0; i < n; ++i)
    if (weight_[i] >= kNegligible) candidates_.push_back(i);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  auto& c = candidates_;
  auto mass = [&](size_t m) {
    double sum = 0;
    for (size_t i = 0; i < m; ++i) sum += weight_[c[i]];
    return sum;
  };
  if (opts_.top_k > 0 && (size_t)opts_.top_k < c.size()) {  // the top_k largest logits, in no order
    std::nth_element(c.begin(), c.begin() + opts_.top_k, c.end(), by_logit);
    c.resize(opts_.top_k);
  }
  double total = mass(c.size());
  if (opts_.top_p < 1.0f) {  // the smallest prefix, by logit, whose mass reaches top_p
    const double target = opts_.top_p * total;
    size_t m = std::min<size_t>(64, c.size());  // the top m first, four times more until they reach it
    for (;;) {
      std::nth_element(c.begin(), c.begin() + (m - 1), c.end(), by_logit);
      if (m == c.size() || mass(m) >= target) break;
      m = std::min(c.size(), 4 * m);
    }
    std::sort(c.begin(), c.begin() + m, by_logit);
    size_t keep = 0;
    for (total = 0; keep < m && total < target;) total += weight_[c[keep++]];
    c.resize(keep);
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (int32_t id : c)
    if ((u -= weight_[id]) < 0) return id;
  return c.back();  // (rounding)
}

}  // namespace fasa
