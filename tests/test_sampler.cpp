#include <cmath>
#include <map>

#include "model/sampler.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

TEST(Sampler, GreedyIsArgmax) {
  Sampler s({0.0f, 40, 0.95f, 1});
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(l), 1);  // lowest index on ties
}

TEST(Sampler, SeededSamplingIsReproducibleAndFollowsTheDistribution) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f), -50.0f};
  Sampler a({1.0f, 0, 1.0f, 123}), b({1.0f, 0, 1.0f, 123});
  std::map<int, int> counts;
  for (int i = 0; i < 20000; ++i) {
    int x = a.sample(l);
    ASSERT_EQ(x, b.sample(l));
    counts[x]++;
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_EQ(counts[3], 0);
}

TEST(Sampler, TopKAndTopPRestrictTheChoice) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler k1({1.0f, 1, 1.0f, 5}), p({1.0f, 0, 0.6f, 5});
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(k1.sample(l), 0);
    EXPECT_LE(p.sample(l), 1);  // 0.5 < 0.6: the top two are kept
  }
  EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), Error);
}

// A flat vocabulary larger than the first guess at the top-p prefix (64): ties go to the lowest ids, so
// top_p 0.5 keeps exactly ids 0-499 and top_k 100 ids 0-99, each drawn about equally often.
TEST(Sampler, TopPAndTopKOverAFlatVocabularyKeepTheirShare) {
  const std::vector<float> flat(1000, 0.25f);
  Sampler p({0.8f, 0, 0.5f, 7}), k({0.8f, 100, 1.0f, 7});
  std::map<int, int> kept;
  for (int i = 0; i < 20000; ++i) {
    const int a = p.sample(flat), b = k.sample(flat);
    ASSERT_LT(a, 500);
    ASSERT_LT(b, 100);
    kept[a / 250]++;  // halves of the kept 500
  }
  EXPECT_NEAR(kept[0] / 20000.0, 0.5, 0.02);
  // Tokens far below the top are never drawn, and a -inf logit is no candidate.
  std::vector<float> l = {0.0f, -60.0f, -INFINITY, 0.0f};
  Sampler t({1.0f, 0, 1.0f, 3});
  for (int i = 0; i < 1000; ++i) {
    const int x = t.sample(l);
    ASSERT_TRUE(x == 0 || x == 3) << x;
  }
}

}  // namespace
}  // namespace fasa
