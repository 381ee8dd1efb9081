#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/kv_rows.h"
#include "ops/kv_traffic.h"

namespace fasa {

float key_dot(const float* q, const KvHeadView& kv, int64_t row) {
  const int nd = kv.n_dom, nr = kv.head_dim - nd;
  float s = kv_dot(q + nd, kv.k_rest_row(row), kv.type, nr);
  if (nd > 0) s += kv_dot(q, kv.k_dom_row(row), kv.type, nd);
  return s;
}

void attention_weights(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, double* p) {
  const double scale = 1.0 / std::sqrt((double)kv.head_dim);
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t j = 0; j < n_rows; ++j) m = std::max(m, p[j] = scale * key_dot(q, kv, rows ? rows[j] : j));
  for (int64_t j = 0; j < n_rows; ++j) sum += (p[j] = std::exp(p[j] - m));
  for (int64_t j = 0; j < n_rows; ++j) p[j] /= sum;
}

void gathered_attention(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, float scale,
                        float* out) {
  grouped_attention(q, 1, kv, rows, n_rows, scale, out);
}

void grouped_attention(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows,
                       float scale, float* out) {
  const int d = kv.head_dim;
  thread_local std::vector<float> max_score, denom;  // [n_q] online-softmax state per query head
  max_score.assign(n_q, -std::numeric_limits<float>::infinity());
  denom.assign(n_q, 0.0f);
  std::fill(out, out + (size_t)n_q * d, 0.0f);
  for (int64_t j = 0; j < n_rows; ++j) {
    const int64_t r = rows ? rows[j] : j;
    const void* v = kv.v_row(r);
    for (int h = 0; h < n_q; ++h) {  // the rows are in L1 after the first head
      float* o = out + (size_t)h * d;
      const float s = scale * key_dot(q + (size_t)h * d, kv, r);
      if (s > max_score[h]) {  // new maximum: rescale what has been accumulated so far
        const float c = std::exp(max_score[h] - s);
        denom[h] *= c;
#pragma omp simd
        for (int i = 0; i < d; ++i) o[i] *= c;
        max_score[h] = s;
      }
      const float w = std::exp(s - max_score[h]);
      denom[h] += w;
      kv_add_scaled(o, w, v, kv.type, d);
    }
  }
  for (int h = 0; h < n_q; ++h)
    if (denom[h] > 0) {
      const float inv = 1.0f / denom[h];
      for (int i = 0; i < d; ++i) out[(size_t)h * d + i] *= inv;
    }
  count_kv_bytes_read((uint64_t)n_rows * 2 * d * kv_elem_bytes(kv.type));  // whole key row + value row, once
}

void attention_reference(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, float scale,
                         float* out) {
  const int d = kv.head_dim;
  std::vector<double> s(n_rows);
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n_rows; ++j) {
    const int64_t r = rows ? rows[j] : j;
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += (double)q[i] * kv.key(r, i);
    s[j] = scale * dot;
    m = std::max(m, s[j]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - m));
  for (int i = 0; i < d; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < n_rows; ++j) acc += s[j] * kv.value(rows ? rows[j] : j, i);
    out[i] = n_rows ? (float)(acc / sum) : 0.0f;
  }
}

}  // namespace fasa
