#include "model/experts.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>

#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace fasa {

namespace {

// Token t's softmax over the router's logits p (in place), its top K experts and their weights
// (renormalised to sum to 1 where `norm`).   p: [NE]; chosen, weights: [K]
void route(float* p, int NE, int K, bool norm, int* chosen, float* weights) {
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
  if (!norm) chosen_total = 1;
  for (int j = 0; j < K; ++j) {
    chosen[j] = order[j];
    weights[j] = p[order[j]] / chosen_total;
  }
}

// Expert e's SwiGLU MLP over its m tokens.   x: [n, E] all tokens; tokens: [m]; y: [m, E]
void run_expert(const ModelConfig& c, const LayerWeights& L, int e, const float* x, const int* tokens, int m, float* y,
                std::vector<float>& xs, std::vector<float>& gate, std::vector<float>& up) {
  const int E = c.n_embd, F = c.n_ff_exp;
  xs.resize((size_t)m * E);
  gate.resize((size_t)m * F);
  up.resize((size_t)m * F);
  for (int i = 0; i < m; ++i) std::copy_n(&x[(size_t)tokens[i] * E], E, &xs[(size_t)i * E]);
  matmul(L.exp_gate[e], xs.data(), m, gate.data());
  matmul(L.exp_up[e], xs.data(), m, up.data());
  for (int i = 0; i < m; ++i) swiglu(&gate[(size_t)i * F], &up[(size_t)i * F], F);
  matmul(L.exp_down[e], gate.data(), m, y);
}

// Every token's router softmax, chosen experts and their weights: s.probs, s.chosen, s.weights.
void route_tokens(const ModelConfig& c, const LayerWeights& L, const float* x, int n, ExpertScratch& s) {
  const int NE = c.n_expert, K = c.n_expert_used;
  s.probs.resize((size_t)n * NE);
  s.chosen.resize((size_t)n * K);
  s.weights.resize((size_t)n * K);
  matmul(L.router, x, n, s.probs.data());
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) route(&s.probs[(size_t)t * NE], NE, K, c.expert_weights_norm, &s.chosen[(size_t)t * K], &s.weights[(size_t)t * K]);
}

// Each expert's tokens, in token order: expert e's are tokens[first[e]..first[e + 1]); the output row
// of token t's j-th chosen expert is slot[t * K + j].
struct ExpertTokens {
  std::vector<int> first, tokens, slot;  // [NE + 1], [n * K], [n * K]
  std::vector<int> active;               // the experts some token chose
};

// chosen: [n, K] each token's experts
ExpertTokens group_by_expert(const std::vector<int>& chosen, int n, int NE, int K) {
  ExpertTokens g{std::vector<int>(NE + 1, 0), std::vector<int>((size_t)n * K), std::vector<int>((size_t)n * K), {}};
  for (int i = 0; i < n * K; ++i) ++g.first[chosen[i] + 1];
  std::partial_sum(g.first.begin(), g.first.end(), g.first.begin());
  std::vector<int> at(g.first.begin(), g.first.end() - 1);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < K; ++j) {
      const int e = chosen[(size_t)t * K + j];
      g.slot[(size_t)t * K + j] = at[e];
      g.tokens[at[e]++] = t;
    }
  for (int e = 0; e < NE; ++e)
    if (g.first[e + 1] > g.first[e]) g.active.push_back(e);
  return g;
}

// Every active expert's MLP over its tokens, into s.ys ([n * K, E]: each expert's outputs at its tokens' places).
void run_experts(const ModelConfig& c, const LayerWeights& L, const float* x, int n, const ExpertTokens& g,
                 ExpertScratch& s) {
  const int E = c.n_embd, K = c.n_expert_used;
  s.ys.resize((size_t)n * K * E);
  const int n_active = (int)g.active.size();
  auto expert = [&](int e, std::vector<float>& xs, std::vector<float>& gate, std::vector<float>& up) {
    run_expert(c, L, e, x, &g.tokens[g.first[e]], g.first[e + 1] - g.first[e], &s.ys[(size_t)g.first[e] * E], xs,
               gate, up);
  };
  if (n_active >= 2 * omp_get_max_threads()) {
    // Enough experts to share out: each thread runs whole experts (their matmuls on that one thread),
    // so a decode step waits at one barrier per layer instead of three per expert.
    std::exception_ptr failure;  // (an exception must not leave the parallel region)
#pragma omp parallel
    {
      std::vector<float> xs, gate, up;
#pragma omp for schedule(dynamic)
      for (int i = 0; i < n_active; ++i) {
        try {
          expert(g.active[i], xs, gate, up);
        } catch (...) {
#pragma omp critical(fasa_expert_failure)
          if (!failure) failure = std::current_exception();
        }
      }
    }
    if (failure) std::rethrow_exception(failure);
  } else {  // few experts: each matmul on all the threads
    for (int e : g.active) expert(e, s.xs, s.gate, s.up);
  }
}

// Each token's weighted outputs into s.out, added in the order of the experts' ids whatever the batch.
void combine_outputs(const ModelConfig& c, int n, const std::vector<int>& slot, ExpertScratch& s) {
  const int E = c.n_embd, K = c.n_expert_used;
  s.out.resize((size_t)n * E);
#pragma omp parallel for schedule(static) if (n > 1)
  for (int t = 0; t < n; ++t) {
    std::vector<int> js(K);  // the token's choices by expert id
    std::iota(js.begin(), js.end(), 0);
    const int* chosen = &s.chosen[(size_t)t * K];
    std::sort(js.begin(), js.end(), [&](int a, int b) { return chosen[a] < chosen[b]; });
    float* o = &s.out[(size_t)t * E];
    std::fill(o, o + E, 0.0f);
    for (int j : js) {
      const float w = s.weights[(size_t)t * K + j];
      const float* y = &s.ys[(size_t)slot[(size_t)t * K + j] * E];
      for (int i = 0; i < E; ++i) o[i] += w * y[i];
    }
  }
}

}  // namespace

void expert_ffn(const ModelConfig& c, const LayerWeights& L, const float* x, int n, ExpertScratch& s) {
  route_tokens(c, L, x, n, s);
  const ExpertTokens g = group_by_expert(s.chosen, n, c.n_expert, c.n_expert_used);
  run_experts(c, L, x, n, g, s);
  combine_outputs(c, n, g.slot, s);
}

}  // namespace fasa
