#include "ops/topk.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <numeric>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace fasa {

namespace {
// A key per index whose unsigned order is (score, then lower index): the selection then compares
// plain integers instead of looking scores up through a comparator (and NaN scores cannot break
// the ordering's strictness).
uint64_t rank_key(float score, int32_t i) {
  const uint32_t bits = std::bit_cast<uint32_t>(score);
  const uint32_t ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;  // float order as unsigned order
  return (uint64_t)ordered << 32 | (0xffffffffu - (uint32_t)i);
}

// Moves the k best of idx's indices to its front: larger score first, ties to the lower index.
void select_best(const float* scores, std::vector<int32_t>& idx, int64_t k) {
  thread_local std::vector<uint64_t> keys;
  keys.resize(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) keys[j] = rank_key(scores[idx[j]], idx[j]);
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<uint64_t>());
  for (int64_t j = 0; j < k; ++j) idx[j] = (int32_t)(0xffffffffu - (uint32_t)keys[j]);
}

// Writes the indices i < n with scores[i] >= threshold to out (room for n) in increasing order and
// returns their count. A vector compare per 16 scores yields a bit mask; most masks are empty (a
// threshold keeps a few percent), and the set bits are walked without a branch per score.
int64_t candidates_at_least(const float* scores, int64_t n, float threshold, int32_t* out) {
  int64_t count = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
#if defined(__AVX__)
    const __m256 t = _mm256_set1_ps(threshold);
    uint32_t mask = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(scores + i), t, _CMP_GE_OQ)) |
                    (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(scores + i + 8), t, _CMP_GE_OQ)) << 8;
#else
    uint32_t mask = 0;
    for (int j = 0; j < 16; ++j) mask |= (uint32_t)(scores[i + j] >= threshold) << j;
#endif
    for (; mask; mask &= mask - 1) out[count++] = (int32_t)(i + std::countr_zero(mask));
  }
  for (; i < n; ++i)
    if (scores[i] >= threshold) out[count++] = (int32_t)i;
  return count;
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
    thread_local std::vector<int32_t> candidates;  // [n] room for all; grows, never shrinks (no refill per call)
    if ((int64_t)candidates.size() < n) candidates.resize(n);
    idx.assign(candidates.data(), candidates.data() + candidates_at_least(scores, n, threshold, candidates.data()));
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
