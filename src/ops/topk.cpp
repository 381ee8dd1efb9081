#include "ops/topk.h"

#include <algorithm>
#include <numeric>

namespace fasa {

void top_k_indices(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  idx.resize(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (k >= n) return;
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
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
