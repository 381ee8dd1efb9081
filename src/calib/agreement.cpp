#include "calib/agreement.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "ops/topk.h"
#include "fasa/error.h"

namespace fasa {

namespace {

// |TopK(scores) ∩ mask|, TopK as top_k_indices picks it (ties to the lower index).
int overlap_by_indices(const float* scores, int64_t n, int k, const std::vector<char>& mask, std::vector<int32_t>& idx) {
  top_k_indices(scores, n, k, idx);
  int hits = 0;
  for (int i = 0; i < k; ++i) hits += mask[idx[i]];
  return hits;
}

// How many of scores[0..n) are > v.
int64_t count_above(const float* scores, int64_t n, float v) {
  int64_t c = 0;
#pragma omp simd reduction(+ : c)
  for (int64_t j = 0; j < n; ++j) c += scores[j] > v;
  return c;
}

// How many of scores[0..n) are >= v.
int64_t count_at_least(const float* scores, int64_t n, float v) {
  int64_t c = 0;
#pragma omp simd reduction(+ : c)
  for (int64_t j = 0; j < n; ++j) c += scores[j] >= v;
  return c;
}

// The same count without selecting from all the scores: a member of the full top K (`top`) with
// score v is in TopK(scores) when fewer than K scores exceed v, so with the members' scores sorted
// (best first) the hits are a prefix, found by bisection with a few counting passes. Where ties at
// the boundary could matter (or a score is NaN), the count by indices decides.
int overlap(const float* scores, int64_t n, int k, const std::vector<int32_t>& top, const std::vector<char>& mask,
            std::vector<float>& vals, std::vector<int32_t>& idx) {
  vals.resize(k);
  for (int i = 0; i < k; ++i) {
    vals[i] = scores[top[i]];
    if (vals[i] != vals[i]) return overlap_by_indices(scores, n, k, mask, idx);
  }
  // A NaN elsewhere takes a place in top_k_indices' order but fails every comparison here.
  if (count_at_least(scores, n, -std::numeric_limits<float>::infinity()) != n)
    return overlap_by_indices(scores, n, k, mask, idx);
  std::sort(vals.begin(), vals.end(), std::greater<float>());
  int lo = 0, hi = k;  // vals[0..lo) are in, vals[hi..k) are out
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (count_above(scores, n, vals[mid]) < k) lo = mid + 1;
    else hi = mid;
  }
  // The last member in: with ties, it is in only if every score >= it fits in the K.
  if (lo > 0 && count_at_least(scores, n, vals[lo - 1]) > k)
    return overlap_by_indices(scores, n, k, mask, idx);
  return lo;
}

}  // namespace

void unpack_chunk_keys(const KvCache& cache, int layer, int64_t n_rows, const FcLayout& fcs, std::vector<float>& first,
                       std::vector<float>& second) {
  const int HKV = cache.n_head_kv(), F = fcs.n_fc(), D = cache.head_dim();
  constexpr int64_t kRows = 256;  // rows per unpacking task
  const int64_t n_blocks = (n_rows + kRows - 1) / kRows;
  first.resize((size_t)HKV * F * n_rows);
  second.resize((size_t)HKV * F * n_rows);
#pragma omp parallel
  {
    std::vector<float> k(D);  // one key row as float
#pragma omp for collapse(2) schedule(dynamic)
    for (int kv_head = 0; kv_head < HKV; ++kv_head)
      for (int64_t blk = 0; blk < n_blocks; ++blk) {
        const KvHeadView kv = cache.view(layer, kv_head, n_rows);
        float *a = &first[(size_t)kv_head * F * n_rows], *b = &second[(size_t)kv_head * F * n_rows];
        for (int64_t j = blk * kRows; j < std::min(n_rows, (blk + 1) * kRows); ++j) {
          kv_load(kv.k_rest_row(j), kv.k_type, D, k.data());
          for (int f = 0; f < F; ++f) {
            const auto d = fcs.dims(f);
            a[(size_t)f * n_rows + j] = k[d[0]];
            b[(size_t)f * n_rows + j] = k[d[1]];
          }
        }
      }
  }
}

void chunk_scores(const float* q, const FcLayout& fcs, const float* first, const float* second, int64_t n_rows,
                  int64_t T, std::vector<float>& partial, std::vector<float>& full) {
  const int F = fcs.n_fc();
  partial.resize((size_t)F * T);
  full.assign(T, 0.0f);
  for (int f = 0; f < F; ++f) {
    const auto d = fcs.dims(f);
    const float qa = q[d[0]], qb = q[d[1]];
    const float *a = &first[(size_t)f * n_rows], *b = &second[(size_t)f * n_rows];
    float* p = &partial[(size_t)f * T];
    for (int64_t j = 0; j < T; ++j) p[j] = qa * a[j] + qb * b[j];
    for (int64_t j = 0; j < T; ++j) full[j] += p[j];
  }
}

AgreementMeter::AgreementMeter(const ModelConfig& c, int top_k, int64_t min_pos, int stride)
    : n_head_(c.n_head), n_head_kv_(c.n_head_kv), head_dim_(c.head_dim), fcs_(c), top_k_(top_k), min_pos_(min_pos),
      stride_(stride),
      fc_sum_((size_t)c.n_layer * c.n_head * fcs_.n_fc(), 0.0), fc_count_((size_t)c.n_layer * c.n_head, 0),
      q_abs_sum_((size_t)c.n_layer * c.n_head * c.head_dim, 0.0),
      k_abs_sum_((size_t)c.n_layer * c.n_head_kv * c.head_dim, 0.0), k_count_(c.n_layer, 0) {
  if (top_k < 1) throw Error("--topk must be at least 1");
  if (stride < 1) throw Error("agreement: the query stride must be at least 1");
}

void AgreementMeter::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  const int D = head_dim_, H = n_head_, HKV = n_head_kv_, F = fcs_.n_fc(), K = top_k_, group = H / HKV;
  if (cache.layout(layer, 0).n_dom != 0) throw Error("agreement: needs a dense run (identity key layout)");
  std::vector<int64_t> measured;  // positions of this call's queries that count
  for (int64_t pos = std::max<int64_t>(p0, min_pos_); pos < p0 + n; ++pos)
    if ((pos - min_pos_) % stride_ == 0 && pos + 1 > K) measured.push_back(pos);  // T <= K: every key is top K
  add_key_magnitudes(layer, p0, n, cache);
  if (measured.empty()) return;
  const int n_pairs = (int)measured.size() * HKV;
  // Every KV head's keys (those the last measured query sees), each chunk's two dims apart.
  const int64_t Tm = measured.back() + 1;
  std::vector<float> first, second;  // [HKV, F, Tm] each
  unpack_chunk_keys(cache, layer, Tm, fcs_, first, second);
#pragma omp parallel
  {
    std::vector<float> full, partial, vals;  // [T], [F, T], [K] scratch
    std::vector<int32_t> top, idx;           // the full scores' top K; scratch
    std::vector<char> mask;
    std::vector<double> fc_sum((size_t)H * F, 0.0), q_abs((size_t)H * D, 0.0);
    std::vector<int64_t> fc_count(H, 0);
#pragma omp for schedule(dynamic)
    for (int i = 0; i < n_pairs; ++i) {
      const int64_t pos = measured[i / HKV], T = pos + 1;
      const int kv_head = i % HKV;
      for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const float* qh = q + ((size_t)(pos - p0) * H + h) * D;
        chunk_scores(qh, fcs_, &first[(size_t)kv_head * F * Tm], &second[(size_t)kv_head * F * Tm], Tm, T, partial, full);
        top_k_mask(full.data(), T, K, top, mask);
        top.resize(K);
        for (int f = 0; f < F; ++f)
          fc_sum[(size_t)h * F + f] += (double)overlap(&partial[(size_t)f * T], T, K, top, mask, vals, idx) / K;
        for (int d = 0; d < D; ++d) q_abs[(size_t)h * D + d] += std::fabs(qh[d]);
        fc_count[h]++;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < fc_sum.size(); ++i) fc_sum_[(size_t)layer * H * F + i] += fc_sum[i];
    for (size_t i = 0; i < fc_count.size(); ++i) fc_count_[(size_t)layer * H + i] += fc_count[i];
    for (size_t i = 0; i < q_abs.size(); ++i) q_abs_sum_[(size_t)layer * H * D + i] += q_abs[i];
  }
}

void AgreementMeter::add_key_magnitudes(int layer, int64_t p0, int n, const KvCache& cache) {
  const int D = head_dim_, HKV = n_head_kv_;
  std::vector<float> k(D);
  std::vector<double> k_abs((size_t)HKV * D, 0.0);  // [HKV, D]
  for (int kv_head = 0; kv_head < HKV; ++kv_head) {
    const KvHeadView kv = cache.view(layer, kv_head, p0 + n);
    for (int64_t j = p0; j < p0 + n; ++j) {
      kv_load(kv.k_rest_row(j), kv.k_type, D, k.data());
      for (int d = 0; d < D; ++d) k_abs[(size_t)kv_head * D + d] += std::fabs(k[d]);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < k_abs.size(); ++i) k_abs_sum_[(size_t)layer * HKV * D + i] += k_abs[i];
  k_count_[layer] += n;
}

std::vector<float> AgreementMeter::channel_qk() const {
  const int D = head_dim_, group = n_head_ / n_head_kv_;
  std::vector<float> out(q_abs_sum_.size(), 0.0f);
  for (size_t lh = 0; lh < fc_count_.size(); ++lh) {
    const size_t layer = lh / n_head_, kv_head = (lh % n_head_) / group;
    if (fc_count_[lh] == 0 || k_count_[layer] == 0) continue;
    for (int d = 0; d < D; ++d)
      out[lh * D + d] = (float)(q_abs_sum_[lh * D + d] / fc_count_[lh] *
                                k_abs_sum_[(layer * n_head_kv_ + kv_head) * D + d] / k_count_[layer]);
  }
  return out;
}

std::vector<float> AgreementMeter::mean_fc_ca() const {
  const int F = fcs_.n_fc();
  std::vector<float> out(fc_sum_.size());
  for (size_t lh = 0; lh < fc_count_.size(); ++lh)
    for (int f = 0; f < F; ++f)
      out[lh * F + f] = fc_count_[lh] ? (float)(fc_sum_[lh * F + f] / fc_count_[lh]) : 0.0f;
  return out;
}

int64_t AgreementMeter::fc_queries() const {  // (a sliding layer's heads, never observed, count none)
  return fc_count_.empty() ? 0 : *std::max_element(fc_count_.begin(), fc_count_.end());
}

std::vector<std::vector<int32_t>> token_windows(const std::vector<int32_t>& tokens, int64_t n_ctx, int32_t bos) {
  if (n_ctx < 2) throw Error("token windows need a context of at least 2 tokens");  // else no progress
  std::vector<std::vector<int32_t>> out;
  const bool has_bos = bos >= 0 && !tokens.empty() && tokens[0] == bos;
  size_t i = 0;
  while (i < tokens.size()) {
    std::vector<int32_t> w;
    if (i > 0 && has_bos) w.push_back(bos);
    const size_t take = std::min<size_t>(tokens.size() - i, (size_t)n_ctx - w.size());
    w.insert(w.end(), tokens.begin() + i, tokens.begin() + i + take);
    i += take;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace fasa
