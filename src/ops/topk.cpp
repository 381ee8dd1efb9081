#include "ops/topk.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace fasa {

namespace {
// Moves the k best of idx's indices to its front: larger score first, ties to the lower index.
void select_best(const float* scores, std::vector<int32_t>& idx, int64_t k) {
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
}
}  // namespace

void top_k_indices(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  if (k < n / 16 && n >= 4096) {
    // k << n (a decode step's budget over a long cache): a threshold from a strided sample of the
    // scores keeps about 3k candidates in one pass, and the exact selection runs on those. The k
    // best are all >= the threshold whenever at least k candidates pass it.
    constexpr int64_t kSample = 1024;
    float sample[kSample];
    const int64_t stride = n / kSample;
    for (int64_t i = 0; i < kSample; ++i) sample[i] = scores[i * stride];
    const int64_t rank = std::min(kSample - 1, 2 * (k * kSample / n) + 8);  // ~2x the expected share, plus slack
    std::nth_element(sample, sample + rank, sample + kSample, std::greater<float>());
    const float threshold = sample[rank];
    idx.clear();
    for (int64_t i = 0; i < n; ++i)
      if (scores[i] >= threshold) idx.push_back((int32_t)i);
    if ((int64_t)idx.size() >= k) {
      select_best(scores, idx, k);
      return;
    }
  }
  idx.resize(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (k < n) select_best(scores, idx, k);
}

void append_top_k(const float* scores, int64_t n, int64_t k, int32_t offset, std::vector<int32_t>& out) {
  thread_local std::vector<int32_t> idx;
  top_k_indices(scores, n, k, idx);
  for (int64_t i = 0; i < std::min(k, n); ++i) out.push_back(offset + idx[i]);
}

void top_k_mask(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx, std::vector<char>& mask) {
  top_k_indices(scores, n, k, idx);
  mask.assign(n, 0);
  for (int64_t i = 0; i < std::min(k, n); ++i) mask[idx[i]] = 1;
}

}  // namespace fasa
