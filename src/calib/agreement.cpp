#include "calib/agreement.h"

#include <algorithm>
#include <numeric>

#include "ops/topk.h"
#include "fasa/error.h"

namespace fasa {

namespace {

// |TopK(scores) ∩ mask|
int overlap(const float* scores, int64_t n, int k, const std::vector<char>& mask, std::vector<int32_t>& idx) {
  top_k_indices(scores, n, k, idx);
  int hits = 0;
  for (int i = 0; i < k; ++i) hits += mask[idx[i]];
  return hits;
}

}  // namespace

AgreementMeter::AgreementMeter(const ModelConfig& c, int top_k, int64_t min_pos, int stride)
    : n_head_(c.n_head), n_head_kv_(c.n_head_kv), head_dim_(c.head_dim), fcs_(c), top_k_(top_k), min_pos_(min_pos),
      stride_(stride),
      fc_sum_((size_t)c.n_layer * c.n_head * fcs_.n_fc(), 0.0), fc_count_((size_t)c.n_layer * c.n_head, 0) {
  if (top_k < 1) throw Error("--topk must be at least 1");
  if (stride < 1) throw Error("agreement: the query stride must be at least 1");
}

void AgreementMeter::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  const int D = head_dim_, H = n_head_, F = fcs_.n_fc(), K = top_k_, group = n_head_ / n_head_kv_;
  if (cache.layout(layer, 0).n_dom != 0) throw Error("agreement: needs a dense run (identity key layout)");
#pragma omp parallel
  {
    std::vector<float> full, partial;  // [T], [F, T]
    std::vector<float> k(D);           // one key row as float
    std::vector<int32_t> idx;
    std::vector<char> mask;
    std::vector<double> fc_sum((size_t)H * F, 0.0);
    std::vector<int64_t> fc_count(H, 0);
#pragma omp for collapse(2) schedule(dynamic)
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < H; ++h) {
        const int64_t pos = p0 + t, T = pos + 1;
        if (pos < min_pos_ || (pos - min_pos_) % stride_ != 0 || T <= K) continue;  // T <= K: all keys are top K
        const KvHeadView kv = cache.view(layer, h / group, T);
        const float* qh = q + ((size_t)t * H + h) * D;
        full.resize(T);
        partial.resize((size_t)F * T);
        for (int64_t j = 0; j < T; ++j) {
          kv_load(kv.k_rest_row(j), kv.type, D, k.data());
          float a = 0;
          for (int f = 0; f < F; ++f) {
            const auto d = fcs_.dims(f);
            const float p = qh[d[0]] * k[d[0]] + qh[d[1]] * k[d[1]];
            partial[(size_t)f * T + j] = p;
            a += p;
          }
          full[j] = a;
        }
        top_k_mask(full.data(), T, K, idx, mask);
        for (int f = 0; f < F; ++f)
          fc_sum[(size_t)h * F + f] += (double)overlap(&partial[(size_t)f * T], T, K, mask, idx) / K;
        fc_count[h]++;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < fc_sum.size(); ++i) fc_sum_[(size_t)layer * H * F + i] += fc_sum[i];
    for (size_t i = 0; i < fc_count.size(); ++i) fc_count_[(size_t)layer * H + i] += fc_count[i];
  }
}

std::vector<float> AgreementMeter::mean_fc_ca() const {
  const int F = fcs_.n_fc();
  std::vector<float> out(fc_sum_.size());
  for (size_t lh = 0; lh < fc_count_.size(); ++lh)
    for (int f = 0; f < F; ++f)
      out[lh * F + f] = fc_count_[lh] ? (float)(fc_sum_[lh * F + f] / fc_count_[lh]) : 0.0f;
  return out;
}

int64_t AgreementMeter::fc_queries() const { return fc_count_.empty() ? 0 : fc_count_[0]; }

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
