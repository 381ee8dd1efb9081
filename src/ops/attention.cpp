#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include "ops/elementwise.h"
#include "ops/kv_rows.h"
#include "ops/kv_traffic.h"

namespace fasa {

float key_dot(const float* q, const KvHeadView& kv, int64_t row) {
  const int nd = kv.n_dom, nr = kv.head_dim - nd;
  float s = kv_dot(q + nd, kv.k_rest_row(row), kv.k_type, nr);
  if (nd > 0) s += kv_dot(q, kv.k_dom_row(row), kv.k_type, nd);
  return s;
}

void attention_weights(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, double* p) {
  const double scale = 1.0 / std::sqrt((double)kv.head_dim);
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t j = 0; j < n_rows; ++j) m = std::max(m, p[j] = scale * key_dot(q, kv, rows ? rows[j] : j));
  count_kv_bytes_read(kv, (uint64_t)n_rows * kv.key_row_bytes());  // the whole key rows
  for (int64_t j = 0; j < n_rows; ++j) sum += (p[j] = std::exp(p[j] - m));
  for (int64_t j = 0; j < n_rows; ++j) p[j] /= sum;
}

void gathered_attention(const float* q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows, float scale,
                        float* out) {
  grouped_attention(q, 1, kv, rows, n_rows, scale, out);
}

void prefetch_rows(const KvHeadView& kv, const int32_t* rows, int64_t j0, int64_t j1) {
  const size_t dom = kv_row_bytes(kv.k_type, kv.n_dom), rest = kv_row_bytes(kv.k_type, kv.head_dim - kv.n_dom);
  auto lines = [](const void* p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o);
  };
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t r = rows ? rows[j] : j;
    if (kv.n_dom) lines(kv.k_dom_row(r), dom);
    lines(kv.k_rest_row(r), rest);
    lines(kv.v_row(r), kv.value_row_bytes());
  }
}

namespace {
// One pass of online-softmax attention over rows [j_begin, j_end) for n_q heads, continuing the state
// in max_score/denom (per head) and out (the unnormalised weighted sum of value rows).
//   q, out: [n_q, d]; max_score, denom: [n_q]
void attend_rows(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t j_begin, int64_t j_end,
                 float scale, float* max_score, float* denom, float* out) {
  // Rows go in blocks: the block's scores for every head come from the transposed TIP kernel on each
  // key plane, each head rescales its output once per block and exponentiates a vector of scores, and
  // the weighted sum of the value rows runs for all heads at once, in registers. Row at a time, the
  // scalar exp and the per-head F16 conversions kept dense attention far below memory bandwidth.
  constexpr int kBlock = 64;
  const int d = kv.head_dim, nd = kv.n_dom, nr = d - nd;
  const DType kt = kv.k_type;
  const size_t dom_bytes = kv_row_bytes(kt, nd), rest_bytes = kv_row_bytes(kt, nr);
  thread_local std::vector<float> q_dom, q_rest;  // [n_q, nd], [n_q, nr]: the scaled query's part per key plane
  thread_local std::vector<float> score, part;    // [n_q, kBlock]
  thread_local std::vector<uint8_t> dom_rows, rest_rows;  // [kBlock, nd], [kBlock, nr] of kt: a block's gathered key rows
  q_dom.resize((size_t)n_q * nd), q_rest.resize((size_t)n_q * nr);
  for (int h = 0; h < n_q; ++h)  // scaled here, so the scores come out scaled
    for (int i = 0; i < d; ++i) {
      float& to = i < nd ? q_dom[(size_t)h * nd + i] : q_rest[(size_t)h * nr + i - nd];
      to = scale * q[(size_t)h * d + i];
    }
  // Few queries score rows with plain dots (tip_scores' choice too), which read gathered rows where
  // they lie; the transposed kernel wants a block's rows side by side, so those are copied first.
  const bool plain_dots = rows && n_q < kTipTransposedMinQueries;
  score.resize((size_t)n_q * kBlock), part.resize(score.size());
  const void* value_rows[kBlock];
  const void* rest_at[kBlock];  // a block's gathered K_rest rows (plain dots)
  const void* dom_at[kBlock];   // and K_dom rows
  dom_rows.resize(kBlock * dom_bytes), rest_rows.resize(kBlock * rest_bytes);

  for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlock) {
    const int b = (int)std::min<int64_t>(kBlock, j_end - j0);
    prefetch_rows(kv, rows, j0 + kBlock, std::min<int64_t>(j0 + 2 * kBlock, j_end));
    if (plain_dots) {
      for (int i = 0; i < b; ++i) {
        rest_at[i] = kv.k_rest_row(rows[j0 + i]);
        if (nd) dom_at[i] = kv.k_dom_row(rows[j0 + i]);
      }
      for (int h = 0; h < n_q; ++h) {
        // data() + offset, not &v[i]: a plane may be empty (no K_dom, or every dim dominant)
        kv_dot_rows(q_rest.data() + (size_t)h * nr, rest_at, b, kt, nr, &score[(size_t)h * b]);
        if (!nd) continue;
        kv_dot_rows(q_dom.data() + (size_t)h * nd, dom_at, b, kt, nd, part.data());
        for (int i = 0; i < b; ++i) score[(size_t)h * b + i] += part[i];
      }
    } else {
      const void* dom = nd ? kv.k_dom_row(j0) : nullptr;  // [b, nd] and [b, nr] key rows, contiguous
      const void* rest = kv.k_rest_row(j0);
      if (rows) {
        for (int i = 0; i < b; ++i) {
          if (nd) std::memcpy(&dom_rows[i * dom_bytes], kv.k_dom_row(rows[j0 + i]), dom_bytes);
          std::memcpy(&rest_rows[i * rest_bytes], kv.k_rest_row(rows[j0 + i]), rest_bytes);
        }
        dom = dom_rows.data(), rest = rest_rows.data();
      }
      tip_scores(q_rest.data(), n_q, rest, kt, nr, 0, b, score.data());  // score: [n_q, b]
      if (nd) {
        tip_scores(q_dom.data(), n_q, dom, kt, nd, 0, b, part.data());
        for (int i = 0; i < n_q * b; ++i) score[i] += part[i];
      }
    }
    for (int i = 0; i < b; ++i) value_rows[i] = kv.v_row(rows ? rows[j0 + i] : j0 + i);

    for (int h = 0; h < n_q; ++h) {
      float* s = &score[(size_t)h * b];
      float* o = out + (size_t)h * d;
      float m = max_score[h];
#pragma omp simd reduction(max : m)
      for (int i = 0; i < b; ++i) m = s[i] > m ? s[i] : m;
      if (m > max_score[h]) {  // new maximum: rescale what has been accumulated so far
        const float c = exp_fast(max_score[h] - m);
        denom[h] *= c;
#pragma omp simd
        for (int i = 0; i < d; ++i) o[i] *= c;
        max_score[h] = m;
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < b; ++i) sum += (s[i] = exp_fast(s[i] - m));
      denom[h] += sum;
    }
    kv_weighted_rows(score.data(), n_q, value_rows, b, kv.v_type, d, out);  // out += weights . value rows
  }
  count_kv_bytes_read(kv, (uint64_t)(j_end - j_begin) * (kv.key_row_bytes() + kv.value_row_bytes()));  // once each
}

// out[h] /= denom[h] (no rows: zeros).   out: [n_q, d]
void normalise(int n_q, int d, const float* denom, float* out) {
  for (int h = 0; h < n_q; ++h) {
    const float inv = denom[h] > 0 ? 1.0f / denom[h] : 0.0f;
    for (int i = 0; i < d; ++i) out[(size_t)h * d + i] *= inv;
  }
}
}  // namespace

void grouped_attention(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows,
                       float scale, float* out) {
  thread_local std::vector<float> max_score, denom;  // [n_q] online-softmax state
  max_score.assign(n_q, -std::numeric_limits<float>::infinity());
  denom.assign(n_q, 0.0f);
  std::fill(out, out + (size_t)n_q * kv.head_dim, 0.0f);
  attend_rows(q, n_q, kv, rows, 0, n_rows, scale, max_score.data(), denom.data(), out);
  normalise(n_q, kv.head_dim, denom.data(), out);
}

void split_grouped_attention(const float* q, int n_q, const KvHeadView& kv, const int32_t* rows, int64_t n_rows,
                             float scale, float* out, int64_t min_slice) {
  const int d = kv.head_dim;
  const int64_t parts = omp_in_parallel() ? std::min<int64_t>(omp_get_num_threads(), n_rows / min_slice) : 1;
  if (parts <= 1) return grouped_attention(q, n_q, kv, rows, n_rows, scale, out);
  // Flash-decoding: each part is a task with its own online-softmax state over a slice of the rows;
  // threads with nothing else to do (more threads than KV heads, or done early) take them up.
  std::vector<float> max_score(parts * n_q, -std::numeric_limits<float>::infinity());  // [parts, n_q]
  std::vector<float> denom(parts * n_q, 0.0f);                                           // [parts, n_q]
  std::vector<float> acc(parts * n_q * d, 0.0f);                                         // [parts, n_q, d]
  for (int64_t p = 0; p < parts; ++p) {
#pragma omp task default(shared) firstprivate(p)
    attend_rows(q, n_q, kv, rows, n_rows * p / parts, n_rows * (p + 1) / parts, scale, &max_score[p * n_q],
                &denom[p * n_q], &acc[p * n_q * d]);
  }
#pragma omp taskwait
  // Merge: rescale every part to the largest maximum, then add denominators and sums.
  for (int h = 0; h < n_q; ++h) {
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    for (int64_t p = 0; p < parts; ++p) m = std::max(m, max_score[p * n_q + h]);
    float* o = out + (size_t)h * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t p = 0; p < parts; ++p) {
      if (denom[p * n_q + h] == 0.0f) continue;  // a part without rows (or all -inf scores)
      const float c = std::exp(max_score[p * n_q + h] - m);
      l += c * denom[p * n_q + h];
      const float* a = &acc[(p * n_q + h) * d];
      for (int i = 0; i < d; ++i) o[i] += c * a[i];
    }
    normalise(1, d, &l, o);
  }
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
