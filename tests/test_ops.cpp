// Per-token ops against plain references: RMSNorm, RoPE (both layouts, relative-position property),
// softmax, SwiGLU, Llama-3 rope scaling, top-k selection.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "model/config.h"
#include "ops/elementwise.h"
#include "ops/topk.h"
#include "test_util.h"

using fasa::test::random_floats;

namespace fasa {
namespace {

TEST(Ops, RmsNormMatchesReference) {
  auto x = random_floats(257, 1), w = random_floats(257, 2);
  std::vector<float> out(257);
  rms_norm(x.data(), w.data(), 257, 1e-5f, out.data());
  double ss = 0;
  for (float v : x) ss += (double)v * v;
  const double s = 1.0 / std::sqrt(ss / 257 + 1e-5);
  std::vector<float> ref(257);
  for (int i = 0; i < 257; ++i) ref[i] = (float)(x[i] * s * w[i]);
  EXPECT_LE(test::normalized_error(out.data(), ref.data(), 257), 1e-6);
}



// NEOX pairs (i, i+half); NORMAL pairs (2i, 2i+1). Permuting dims NEOX->NORMAL must commute with RoPE.
TEST(Ops, RopeLayoutsAgreeUnderThePairPermutation) {
  const int D = 64, H = 3;
  ModelConfig c;
  c.n_rot = D;
  c.rope_base = 10000;
  auto inv = c.rope_inv_freq();
  std::vector<float> cs(D);
  rope_cos_sin(inv.data(), D / 2, 1234, cs.data());
  auto neox = random_floats(H * D, 5);
  std::vector<float> normal(H * D);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < D / 2; ++i) {
      normal[h * D + 2 * i] = neox[h * D + i];
      normal[h * D + 2 * i + 1] = neox[h * D + i + D / 2];
    }
  rope(neox.data(), H, D, D, RopeLayout::Neox, cs.data());
  rope(normal.data(), H, D, D, RopeLayout::Normal, cs.data());
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < D / 2; ++i) {
      EXPECT_FLOAT_EQ(normal[h * D + 2 * i], neox[h * D + i]);
      EXPECT_FLOAT_EQ(normal[h * D + 2 * i + 1], neox[h * D + i + D / 2]);
    }
}

// q(m) . k(n) depends only on m - n, and each plane (frequency chunk) on its own too.
TEST(Ops, RopeScoreDependsOnlyOnRelativePosition) {
  const int D = 32;
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    ModelConfig c;
    c.n_rot = D;
    c.rope_base = 10000;
    auto inv = c.rope_inv_freq();
    auto q0 = random_floats(D, 7), k0 = random_floats(D, 8);
    auto score = [&](int64_t pq, int64_t pk) {
      std::vector<float> q = q0, k = k0, cq(D), ck(D);
      rope_cos_sin(inv.data(), D / 2, pq, cq.data());
      rope_cos_sin(inv.data(), D / 2, pk, ck.data());
      rope(q.data(), 1, D, D, layout, cq.data());
      rope(k.data(), 1, D, D, layout, ck.data());
      double s = 0;
      for (int i = 0; i < D; ++i) s += (double)q[i] * k[i];
      return s;
    };
    EXPECT_NEAR(score(10, 3), score(107, 100), 1e-3);
    EXPECT_NEAR(score(50, 50), score(0, 0), 1e-4);
    EXPECT_GT(std::fabs(score(10, 3) - score(10, 4)), 1e-4);  // and it does depend on the offset
  }
}

TEST(Ops, RopeLeavesDimsPastNRotAlone) {
  const int D = 16, R = 8;
  ModelConfig c;
  c.n_rot = R;
  auto inv = c.rope_inv_freq();
  std::vector<float> cs(R);
  rope_cos_sin(inv.data(), R / 2, 77, cs.data());
  auto x = random_floats(D, 3), y = x;
  rope(y.data(), 1, D, R, RopeLayout::Neox, cs.data());
  for (int i = R; i < D; ++i) EXPECT_EQ(x[i], y[i]);
  EXPECT_NE(x[0], y[0]);
}

TEST(Ops, ExpFastMatchesStdExp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> x(-87.0f, 88.0f);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 0.34657f, -0.34658f, 88.0f, -87.0f, -20.5f};
  for (int i = 0; i < 100000; ++i) xs.push_back(x(rng));
  double worst = 0;
  for (float v : xs) worst = std::max(worst, std::abs(exp_fast(v) / std::exp((double)v) - 1.0));
  EXPECT_LT(worst, 5e-7);
  EXPECT_GT(exp_fast(-1000.0f), 0.0f);  // clamped, finite
  EXPECT_LT(exp_fast(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(exp_fast(1000.0f)));
}

TEST(Ops, SoftmaxAndSwiglu) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f};  // large values must not overflow
  softmax(x.data(), 3);
  const double e = std::exp(1.0), z = 1 + e + 1 / e;
  EXPECT_NEAR(x[0], 1 / z, 1e-6);
  EXPECT_NEAR(x[1], e / z, 1e-6);
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 5.0f, 2.0f};
  swiglu(g.data(), u.data(), 3);
  EXPECT_NEAR(g[0], -2.0 / (1 + std::exp(2.0)), 1e-6);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], 3.0 / (1 + std::exp(-3.0)) * 2, 1e-5);
}

TEST(Ops, Llama3RopeScalingKeepsHighAndDividesLowFrequencies) {
  // Llama-3.1 settings on a 128-dim head: factor 8, low 1, high 4, original context 8192.
  auto f = llama3_rope_factors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);    // wavelength 2*pi: short, kept
  EXPECT_FLOAT_EQ(f[63], 8.0f);   // longest wavelengths: divided by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1] - 1e-6f);  // monotone in between
}

}  // namespace
}  // namespace fasa

namespace fasa {
namespace {

// Top-k against a full sort (larger first, ties to the lower index), on random scores with many
// ties, for small k over long inputs (the sampled-threshold path) and everything else.
TEST(Ops, TopKEqualsTheFirstKOfASort) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 10, 4095, 4096, 20000, 65536})
    for (int64_t k : {1, 5, 64, 256, 1000, 4096}) {
      if (k > n) continue;
      for (int ties : {0, 1}) {
        std::vector<float> s(n);
        std::normal_distribution<float> normal;
        for (float& x : s) x = ties ? (float)(int)(normal(rng) * 4) : normal(rng);
        std::vector<int32_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
        std::vector<int32_t> idx;
        top_k_indices(s.data(), n, k, idx);
        ASSERT_GE((int64_t)idx.size(), k);
        std::vector<int32_t> got(idx.begin(), idx.begin() + k), want(order.begin(), order.begin() + k);
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(got, want) << "n=" << n << " k=" << k << " ties=" << ties;
      }
    }
}

}  // namespace
}  // namespace fasa
