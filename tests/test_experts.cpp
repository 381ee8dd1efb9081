// The mixture-of-experts feed-forward against a plain implementation of its definition, and each token's
// result independent of the batch it comes in.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/experts.h"
#include "test_util.h"

using namespace fasa;

namespace {

struct Experts {
  ModelConfig c;
  LayerWeights L;
  std::vector<std::vector<float>> data;  // the matrices' values, [rows * cols] each

  Matrix matrix(int64_t rows, int64_t cols, uint32_t seed) {
    data.push_back(test::random_floats((size_t)(rows * cols), seed, 0.2f));
    return {DType::F32, rows, cols, (size_t)cols * 4, reinterpret_cast<const uint8_t*>(data.back().data())};
  }

  Experts(int n_expert, int used) {
    c.n_embd = 64, c.n_expert = n_expert, c.n_expert_used = used, c.n_ff_exp = 32;
    data.reserve(1 + 3 * n_expert);  // (the matrices point into it)
    L.router = matrix(n_expert, c.n_embd, 1);
    for (int e = 0; e < n_expert; ++e) {
      L.exp_gate.push_back(matrix(c.n_ff_exp, c.n_embd, 10 + e));
      L.exp_up.push_back(matrix(c.n_ff_exp, c.n_embd, 100 + e));
      L.exp_down.push_back(matrix(c.n_embd, c.n_ff_exp, 1000 + e));
    }
  }

  // The definition, in double: softmax over all experts, the top `used`, their weights renormalised.
  std::vector<double> reference(const float* x) const {
    const int E = c.n_embd, F = c.n_ff_exp;
    auto apply = [](const Matrix& m, const std::vector<double>& v) {
      const float* w = reinterpret_cast<const float*>(m.data);
      std::vector<double> y(m.rows);
      for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t i = 0; i < m.cols; ++i) y[r] += (double)w[r * m.cols + i] * v[i];
      return y;
    };
    const std::vector<double> xv(x, x + E);
    std::vector<double> p = apply(L.router, xv);
    const double top = *std::max_element(p.begin(), p.end());
    for (double& v : p) v = std::exp(v - top);
    std::vector<int> order(c.n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int j = 0; j < c.n_expert_used; ++j) chosen += p[order[j]];
    std::vector<double> out(E);
    for (int j = 0; j < c.n_expert_used; ++j) {
      const int e = order[j];
      std::vector<double> g = apply(L.exp_gate[e], xv), u = apply(L.exp_up[e], xv);
      for (int i = 0; i < F; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const std::vector<double> y = apply(L.exp_down[e], g);
      for (int i = 0; i < E; ++i) out[i] += p[e] / chosen * y[i];
    }
    return out;
  }
};

}  // namespace

TEST(Experts, EqualTheDefinition) {
  for (auto [n_expert, used] : {std::pair{8, 2}, {6, 1}, {5, 5}}) {
    Experts m(n_expert, used);
    const int n = 7, E = m.c.n_embd;
    const auto x = test::random_floats((size_t)n * E, 3);
    ExpertScratch s;
    expert_ffn(m.c, m.L, x.data(), n, s);
    std::vector<float> got(s.out), want;
    for (int t = 0; t < n; ++t)
      for (double v : m.reference(&x[(size_t)t * E])) want.push_back((float)v);
    EXPECT_LE(test::normalized_error(got.data(), want.data(), want.size()), 1e-5) << n_expert << " experts, " << used << " used";
  }
}

// Bit for bit, whichever way the experts are shared out: alone (each matmul on all the threads) or
// together (whole experts per thread), on one thread or two.
TEST(Experts, EachTokensResultIsItsOwnInAnyBatch) {
  Experts m(8, 3);
  const int n = 9, E = m.c.n_embd;
  const auto x = test::random_floats((size_t)n * E, 4);
  const int threads = omp_get_max_threads();
  for (int nt : {1, 2}) {
    omp_set_num_threads(nt);
    ExpertScratch s;
    expert_ffn(m.c, m.L, x.data(), n, s);
    const std::vector<float> together = s.out;
    for (int t = 0; t < n; ++t) {
      expert_ffn(m.c, m.L, &x[(size_t)t * E], 1, s);
      for (int i = 0; i < E; ++i) ASSERT_EQ(s.out[i], together[(size_t)t * E + i]) << nt << " threads, token " << t;
    }
  }
  omp_set_num_threads(threads);
}
