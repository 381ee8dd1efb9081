#include "ops/topk.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>

#if defined(__AVX2__)
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

#if defined(__AVX2__) && !defined(__AVX512F__)
// kLeftPack[m]: the positions of mask m's set bits, in increasing order (the rest zero).
struct LeftPackTable {
  uint64_t entry[256];
  constexpr LeftPackTable() : entry() {
    for (int m = 0; m < 256; ++m)
      for (int b = 0, j = 0; b < 8; ++b)
        if (m >> b & 1) entry[m] |= (uint64_t)b << (8 * j++);
  }
};
constexpr LeftPackTable kLeftPack;
#endif

// Writes the indices i < n with scores[i] >= threshold to out (room for n + 16) in increasing order
// and returns their count. No branch depends on a score: every group of indices is stored at the
// current end and the end moves by the group's count (a branch per set bit mispredicted often).
int64_t candidates_at_least(const float* scores, int64_t n, float threshold, int32_t* out) {
  int64_t count = 0, i = 0;
#if defined(__AVX512F__)
  const __m512 t = _mm512_set1_ps(threshold);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(scores + i), t, _CMP_GE_OQ);
    const __m512i idx = _mm512_add_epi32(lanes, _mm512_set1_epi32((int32_t)i));
    _mm512_storeu_si512(out + count, _mm512_maskz_compress_epi32(m, idx));
    count += std::popcount((uint32_t)m);
  }
#elif defined(__AVX2__)
  const __m256 t = _mm256_set1_ps(threshold);
  for (; i + 8 <= n; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(scores + i), t, _CMP_GE_OQ));
    const __m256i pos = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((int64_t)kLeftPack.entry[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + count), _mm256_add_epi32(pos, _mm256_set1_epi32((int32_t)i)));
    count += std::popcount((uint32_t)m);
  }
#endif
  for (; i < n; ++i) {
    out[count] = (int32_t)i;
    count += scores[i] >= threshold;
  }
  return count;
}

// A value that between `want` and 1.25 * `want` of the sample reach (at least `want` of them always):
// bisection on the value, each step a vectorised count. The caller needs no exact rank, only a
// threshold that keeps a few times k candidates.   sample: [n]
float threshold_reached_by(const float* sample, int n, int want) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int i = 0; i < n; ++i) {  // NaNs compare false: never a bound
    lo = sample[i] < lo ? sample[i] : lo;
    hi = sample[i] > hi ? sample[i] : hi;
  }
  for (int iter = 0; iter < 24 && lo < hi; ++iter) {  // count(>= lo) >= want throughout
    const float mid = lo + (hi - lo) * 0.5f;
    int count = 0;
#pragma omp simd reduction(+ : count)
    for (int i = 0; i < n; ++i) count += sample[i] >= mid;
    if (count < want) {
      hi = mid;
    } else {
      lo = mid;
      if (4 * count <= 5 * want) break;
    }
  }
  return lo;
}

// Drops candidates below a threshold that at least k (and at most about 1.25 k) of them reach: the
// exact selection then sorts keys of few more than k.   idx: [>= k] candidate indices, in order
void keep_near_k(const float* scores, std::vector<int32_t>& idx, int64_t k) {
  thread_local std::vector<float> s;  // [idx.size()] the candidates' scores
  const int64_t m = (int64_t)idx.size();
  s.resize(m);
  for (int64_t j = 0; j < m; ++j) s[j] = scores[idx[j]];
  const float threshold = threshold_reached_by(s.data(), (int)m, (int)k);
  int64_t kept = 0;
  for (int64_t j = 0; j < m; ++j) {
    idx[kept] = idx[j];
    kept += s[j] >= threshold;
  }
  idx.resize(kept);
}

}  // namespace

void top_k_indices(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  if (k < n / 16 && n >= 4096) {
    // k << n (a decode step's budget over a long cache): a threshold from a strided sample of the
    // scores keeps about 3k candidates in one pass, a second one (on their scores) about 1.25k, and
    // the exact selection runs on those. The k best are all >= the thresholds whenever at least k
    // candidates pass the first (the second always keeps k).
    constexpr int64_t kSample = 1024;
    float sample[kSample];
    const int64_t stride = n / kSample;
    for (int64_t i = 0; i < kSample; ++i) sample[i] = scores[i * stride];
    const int want = (int)std::min(kSample, 2 * (k * kSample / n) + 8);  // ~2x the expected share, plus slack
    const float threshold = threshold_reached_by(sample, kSample, want);
    thread_local std::vector<int32_t> candidates;  // [n + 16] room for all; grows, never shrinks (no refill per call)
    if ((int64_t)candidates.size() < n + 16) candidates.resize(n + 16);
    idx.assign(candidates.data(), candidates.data() + candidates_at_least(scores, n, threshold, candidates.data()));
    if ((int64_t)idx.size() >= k) {
      keep_near_k(scores, idx, k);
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
