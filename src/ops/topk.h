#pragma once
// O(n) top-k selection (nth_element), the last step of every score-based token selection.
#include <cstdint>
#include <vector>

namespace fasa {

// idx[0..k) = indices of the k largest of scores[0..n) (any order; ties to the lower index).
// idx is scratch (k <= its size afterwards <= n).   0 < k <= n
void top_k_indices(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx);

// Appends offset + i for the k largest scores[i] to `out`.
void append_top_k(const float* scores, int64_t n, int64_t k, int32_t offset, std::vector<int32_t>& out);

// mask[i] = 1 for the k largest of scores[0..n), 0 otherwise (mask resized to n; idx is scratch).
void top_k_mask(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx, std::vector<char>& mask);

}  // namespace fasa
