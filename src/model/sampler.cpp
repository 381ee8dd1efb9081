#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "fasa/error.h"

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
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  const int k = opts_.top_k > 0 ? std::min(opts_.top_k, n) : n;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(k);
  std::vector<double> p(k);
  for (int i = 0; i < k; ++i) p[i] = std::exp((double)(logits[idx[i]] - logits[idx[0]]) / opts_.temperature);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  // Keep the smallest prefix whose probability mass reaches top_p.
  double mass = 0;
  int keep = 0;
  while (keep < k) {
    mass += p[keep++] / total;
    if (mass >= opts_.top_p) break;
  }
  std::discrete_distribution<int> pick(p.begin(), p.begin() + keep);
  return idx[pick(rng_)];
}

}  // namespace fasa
