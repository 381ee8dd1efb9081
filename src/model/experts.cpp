#include "model/experts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace fasa {

void expert_ffn(const ModelConfig& c, const LayerWeights& L, const float* x, int n, ExpertScratch& s) {
  const int E = c.n_embd, NE = c.n_expert, K = c.n_expert_used, F = c.n_ff_exp;
  s.probs.resize((size_t)n * NE);
  s.chosen.resize((size_t)n * K);
  s.weights.resize((size_t)n * K);
  matmul(L.router, x, n, s.probs.data());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    float* p = &s.probs[(size_t)t * NE];
    const float top = *std::max_element(p, p + NE);
    float total = 0;
    for (int e = 0; e < NE; ++e) total += p[e] = std::exp(p[e] - top);
    for (int e = 0; e < NE; ++e) p[e] /= total;
    std::vector<int> order(NE);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float chosen_total = 0;
    for (int j = 0; j < K; ++j) chosen_total += p[order[j]];
    for (int j = 0; j < K; ++j) {
      s.chosen[(size_t)t * K + j] = order[j];
      s.weights[(size_t)t * K + j] = p[order[j]] / chosen_total;
    }
  }

  s.out.assign((size_t)n * E, 0.0f);
  std::vector<int> tokens;      // [m] the tokens that chose expert e
  std::vector<float> token_w;   // [m] and e's weight for each
  for (int e = 0; e < NE; ++e) {
    tokens.clear();
    token_w.clear();
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < K; ++j)
        if (s.chosen[(size_t)t * K + j] == e) {
          tokens.push_back(t);
          token_w.push_back(s.weights[(size_t)t * K + j]);
        }
    const int m = (int)tokens.size();
    if (m == 0) continue;
    s.xs.resize((size_t)m * E);
    s.gate.resize((size_t)m * F);
    s.up.resize((size_t)m * F);
    s.ys.resize((size_t)m * E);
    for (int i = 0; i < m; ++i) std::copy_n(&x[(size_t)tokens[i] * E], E, &s.xs[(size_t)i * E]);
    matmul(L.exp_gate[e], s.xs.data(), m, s.gate.data());
    matmul(L.exp_up[e], s.xs.data(), m, s.up.data());
    for (int i = 0; i < m; ++i) swiglu(&s.gate[(size_t)i * F], &s.up[(size_t)i * F], F);
    matmul(L.exp_down[e], s.gate.data(), m, s.ys.data());
    for (int i = 0; i < m; ++i) {
      float* o = &s.out[(size_t)tokens[i] * E];
      const float* y = &s.ys[(size_t)i * E];
      for (int j = 0; j < E; ++j) o[j] += token_w[i] * y[j];
    }
  }
}

}  // namespace fasa
