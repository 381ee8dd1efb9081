// Each baseline policy against a plain reference on random caches, and every policy through the model:
// with a budget at least the context, all of them equal dense attention.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "model/session.h"
#include "ops/attention.h"
#include "sparse/baselines.h"
#include "select/group_attention.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

struct RandomCache {
  int D, T;
  std::vector<float> k, v, q;
  KvCache cache;
  RandomCache(int d, int t, uint32_t seed) : D(d), T(t), k(test::random_floats((size_t)t * d, seed)),
      v(test::random_floats((size_t)t * d, seed + 1)), q(test::random_floats(d, seed + 2)), cache(1, 1, d, t) {
    for (int j = 0; j < T; ++j) cache.store(0, 0, j, &k[(size_t)j * D], &v[(size_t)j * D]);
  }
  KvHeadView view(int64_t n) const { return cache.view(0, 0, n); }
  AttentionQuery query(int64_t n) const { return {0, 0, 0, n - 1, q.data()}; }
  // Rows >= m get their keys negated: what the cache holds once truncated to m and written again.
  void negate_keys_from(int m) {
    for (int j = m; j < T; ++j) {
      for (int d = 0; d < D; ++d) k[(size_t)j * D + d] = -k[(size_t)j * D + d];
      cache.store(0, 0, j, &k[(size_t)j * D], &v[(size_t)j * D]);
    }
  }
  float dot(int j) const {
    float s = 0;
    for (int d = 0; d < D; ++d) s += q[d] * k[(size_t)j * D + d];
    return s;
  }
};

std::set<int32_t> pick(AttentionPolicy& p, const RandomCache& c, int64_t n) {
  std::vector<int32_t> rows;
  EXPECT_TRUE(select_one(p, c.query(n), c.view(n), rows));
  std::set<int32_t> s(rows.begin(), rows.end());
  EXPECT_EQ(s.size(), rows.size()) << "duplicate rows";
  for (int32_t r : rows) EXPECT_TRUE(r >= 0 && r < n);
  return s;
}

std::set<int32_t> top_by(const std::vector<float>& score, int n) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
  return std::set<int32_t>(idx.begin(), idx.begin() + n);
}

TEST(Oracle, PicksTheExactTopLogits) {
  RandomCache c(32, 200, 1);
  OraclePolicy p({20, false}, {}, 1);
  std::vector<float> s(200);
  for (int j = 0; j < 200; ++j) s[j] = c.dot(j);
  EXPECT_EQ(pick(p, c, 200), top_by(s, 20));
  std::vector<int32_t> rows;
  EXPECT_FALSE(select_one(p, c.query(20), c.view(20), rows));  // budget == context: dense
}

TEST(Stream, SinksAndRecentWindow) {
  RandomCache c(8, 100, 2);
  StreamPolicy p({20, false}, {}, 1, 8);
  std::set<int32_t> want;
  for (int j = 0; j < 8; ++j) want.insert(j);
  for (int j = 88; j < 100; ++j) want.insert(j);
  EXPECT_EQ(pick(p, c, 100), want);
}

TEST(Random, SeededDistinctAndUniform) {
  RandomCache c(8, 100, 3);
  RandomPolicy a({30, false}, {}, 1, 7), b({30, false}, {}, 1, 7), other({30, false}, {}, 1, 8);
  const auto sa = pick(a, c, 100);
  EXPECT_EQ(sa.size(), 30u);
  EXPECT_EQ(sa, pick(b, c, 100));
  EXPECT_NE(sa, pick(other, c, 100));
  std::vector<int> hits(100, 0);  // over many steps every row gets chosen about equally often
  for (int step = 0; step < 200; ++step) {
    std::vector<int32_t> rows;
    ASSERT_TRUE(select_one(a, {0, 0, 0, 1000 + step, c.q.data()}, c.view(100), rows));
    for (int32_t r : rows) hits[r]++;
  }
  EXPECT_GT(*std::min_element(hits.begin(), hits.end()), 30);  // expected 60 each
  EXPECT_LT(*std::max_element(hits.begin(), hits.end()), 95);
}

TEST(Quest, ReadsTheNewestPageAndTheBestOthersByUpperBound) {
  RandomCache c(16, 200, 4);  // 12 full pages + the newest, of 8 rows
  QuestPolicy p({48, false}, {}, 1, 1);
  std::vector<float> bound(12);
  for (int pg = 0; pg < 12; ++pg) {
    float s = 0, best = -INFINITY;
    for (int d = 0; d < 16; ++d) {
      float lo = INFINITY, hi = -INFINITY;
      for (int j = pg * 16; j < pg * 16 + 16; ++j) {
        lo = std::min(lo, c.k[j * 16 + d]);
        hi = std::max(hi, c.k[j * 16 + d]);
      }
      s += std::max(c.q[d] * lo, c.q[d] * hi);
    }
    for (int j = pg * 16; j < pg * 16 + 16; ++j) best = std::max(best, c.dot(j));
    EXPECT_GE(s, best - 1e-4) << "the page score bounds every logit in the page";
    bound[pg] = s;
  }
  std::set<int32_t> want;  // 8 newest rows, then 40 rows' worth of whole pages: the best 2
  for (int j = 192; j < 200; ++j) want.insert(j);
  for (int pg : top_by(bound, 2))
    for (int j = pg * 16; j < pg * 16 + 16; ++j) want.insert(j);
  EXPECT_EQ(pick(p, c, 200), want);
  EXPECT_EQ(pick(p, c, 200), want);  // summaries are cached: same answer
}

// The newest page's min/max box is the smallest of all; it must not compete with older pages.
TEST(Quest, KeepsTheNewestTokensWhenOlderPagesBoundHigher) {
  RandomCache c(16, 200, 4);
  std::fill(c.q.begin(), c.q.end(), 1.0f);
  for (int j = 0; j < 200; ++j)  // old keys point along q, the newest ones away from it
    for (int d = 0; d < 16; ++d) c.k[j * 16 + d] = j < 176 ? std::fabs(c.k[j * 16 + d]) : -1.0f;
  for (int j = 0; j < 200; ++j) c.cache.store(0, 0, j, &c.k[(size_t)j * 16], &c.v[(size_t)j * 16]);
  for (int64_t budget : {48, 64, 5}) {
    QuestPolicy p({(double)budget, false}, {}, 1, 1);
    const auto s = pick(p, c, 200);
    EXPECT_EQ((int64_t)s.size(), budget == 5 ? 5 : 8 + (budget - 8) / 16 * 16) << budget;
    EXPECT_TRUE(s.count(199)) << "budget " << budget << ": the newest token was dropped";
    for (int32_t r = budget == 5 ? 195 : 192; r < 200; ++r) EXPECT_TRUE(s.count(r)) << budget;
  }
  // A whole newest page (n a multiple of 16) is kept too, though it bounds lowest.
  QuestPolicy p({48, false}, {}, 1, 1);
  const auto s = pick(p, c, 192);
  for (int32_t r = 176; r < 192; ++r) EXPECT_TRUE(s.count(r)) << r;
  EXPECT_EQ(s.size(), 48u);
}

TEST(Sparq, AllDimsEqualsOracleAndFewDimsApproximate) {
  RandomCache c(32, 300, 5);
  SparqPolicy all({25, false}, {}, 1, 32), few({25, false}, {}, 1, 4);
  OraclePolicy oracle({25, false}, {}, 1);
  EXPECT_EQ(pick(all, c, 300), pick(oracle, c, 300));
  const auto f = pick(few, c, 300), o = pick(oracle, c, 300);
  std::vector<int32_t> common;
  std::set_intersection(f.begin(), f.end(), o.begin(), o.end(), std::back_inserter(common));
  EXPECT_GT(common.size(), 2u);   // better than chance (25 * 25 / 300 ~ 2)
  EXPECT_LT(common.size(), 25u);
}

TEST(H2o, KeepsRecentAndHeavyHittersAndNeverRevives) {
  RandomCache c(16, 120, 6);
  H2oPolicy p({20, false}, {}, 1, 1);
  std::vector<int32_t> rows;
  for (int64_t n = 1; n <= 20; ++n) EXPECT_FALSE(select_one(p, c.query(n), c.view(n), rows));  // dense, accumulating
  std::set<int32_t> evicted;
  for (int64_t n = 21; n <= 120; ++n) {
    const auto s = pick(p, c, n);
    EXPECT_EQ(s.size(), 20u);
    for (int64_t j = n - 10; j < n; ++j) EXPECT_TRUE(s.count((int32_t)j)) << "recent row " << j;
    for (int32_t e : evicted) EXPECT_FALSE(s.count(e)) << "row " << e << " came back";
    for (int64_t j = 0; j < n - 1; ++j)
      if (!s.count((int32_t)j)) evicted.insert((int32_t)j);
  }
}

TEST(SnapKv, KeepsWindowAndFreshTokensWithinBudget) {
  RandomCache c(16, 200, 7);
  SnapKvPolicy p({40, false}, {}, 1, 1, 16, 8, 16);
  std::vector<int32_t> rows;
  for (int64_t n = 1; n <= 40; ++n) EXPECT_FALSE(select_one(p, c.query(n), c.view(n), rows));
  for (int64_t n = 41; n <= 200; ++n) {
    const auto s = pick(p, c, n);
    EXPECT_LE(s.size(), 40u);
    EXPECT_GE(s.size(), 20u);
    EXPECT_TRUE(s.count((int32_t)n - 1));  // its own token
  }
}

// What selecting reads counts in the KV traffic (F16 cache: 2-byte elements).
TEST(KvTraffic, SelectionReadsAreCounted) {
  const uint64_t D = 32, n = 200, eb = 2;
  RandomCache c((int)D, (int)n, 11);
  auto counted = [&](AttentionPolicy& p, int64_t rows) {
    const uint64_t b0 = c.cache.bytes_read();
    std::vector<int32_t> picked;
    select_one(p, c.query(rows), c.view(rows), picked);
    return c.cache.bytes_read() - b0;
  };
  OraclePolicy oracle({20, false}, {}, 1);
  EXPECT_EQ(counted(oracle, n), n * D * eb);  // every whole key
  SparqPolicy sparq({20, false}, {}, 1, 4);
  EXPECT_EQ(counted(sparq, n), n * 4 * eb);  // 4 dims of every key
  QuestPolicy quest({48, false}, {}, 1, 1);
  const uint64_t summaries = 12 * 2 * D * sizeof(float);  // the 12 pages before the newest one
  EXPECT_EQ(counted(quest, n), 12 * 16 * D * eb + summaries);  // their keys, once, to summarise them
  EXPECT_EQ(counted(quest, n), summaries);
  StreamPolicy stream({20, false}, {}, 1, 8);
  EXPECT_EQ(counted(stream, n), 0u);
  H2oPolicy h2o({100, false}, {}, 1, 1);
  EXPECT_EQ(counted(h2o, 80), 80 * D * eb + 80 * sizeof(double));  // a dense step: every key, every score
}

// Truncation (on_truncate) then other keys after the cut: no state of the cut rows survives.
TEST(Truncate, QuestSummarisesTheRewrittenPagesAgain) {
  RandomCache before(16, 200, 8), after(16, 200, 8);
  after.negate_keys_from(40);  // page 2 (rows 32..47) is half rewritten
  QuestPolicy p({48, false}, {}, 1, 1), fresh({48, false}, {}, 1, 1);
  pick(p, before, 200);  // summarises all 12 whole pages
  p.on_truncate(40);
  EXPECT_EQ(pick(p, after, 200), pick(fresh, after, 200));
}

TEST(Truncate, SnapKvForgetsTheQueriesAndSelectionOfCutTokens) {
  RandomCache before(16, 200, 9), after(16, 200, 9);
  after.negate_keys_from(30);
  SnapKvPolicy p({40, false}, {}, 1, 1, 16, 8, 16), fresh({40, false}, {}, 1, 1, 16, 8, 16);
  std::vector<int32_t> rows;
  for (int64_t n = 1; n <= 150; ++n) select_one(p, before.query(n), before.view(n), rows);  // selects at 145
  p.on_truncate(30);
  // Its window only held queries of cut tokens: now it knows what a fresh one does.
  EXPECT_EQ(pick(p, after, 160), pick(fresh, after, 160));
}

TEST(Truncate, H2oDropsTheCutRowsAndKeepsItsEvictions) {
  RandomCache before(16, 120, 10), after(16, 120, 10);
  after.negate_keys_from(60);
  H2oPolicy p({20, false}, {}, 1, 1);
  std::set<int32_t> last;
  for (int64_t n = 1; n <= 120; ++n) {
    std::vector<int32_t> rows;
    if (select_one(p, before.query(n), before.view(n), rows)) last = std::set<int32_t>(rows.begin(), rows.end());
  }
  p.on_truncate(60);
  std::set<int32_t> want;  // the rows before the cut it still kept, and the new one
  for (int32_t r : last)
    if (r < 60) want.insert(r);
  ASSERT_LT(want.size(), 19u);
  want.insert(60);
  EXPECT_EQ(pick(p, after, 61), want);
}

// A policy's own pick with `budget` rows (no dense shortcut), through the decode step's sparse path.
class OwnPick final : public AttentionPolicy {
 public:
  OwnPick(SparsePolicy& p, int64_t budget) : p_(p), budget_(budget) {}
  std::string_view name() const override { return p_.name(); }
  void select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) override {
    p_.pick(queries, n_q, kv, budget_, rows);
    std::fill(sparse, sparse + n_q, true);
    picked.assign(rows, rows + n_q);
  }
  KeyLayout key_layout(int layer, int kv_head) const override { return p_.key_layout(layer, kv_head); }
  std::vector<std::vector<int32_t>> picked;

 private:
  SparsePolicy& p_;
  int64_t budget_;
};

// Every policy's pick of all n rows, in its own order, gives dense attention; one row fewer does not.
TEST(PolicyPicks, EveryRowEqualsDenseAttention) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const ModelConfig& c = m->config;
  const int D = c.head_dim, group = c.n_head / c.n_head_kv, layer = 1;
  const int64_t n = 100;  // 6 whole pages and a partial one for Quest
  const float scale = 1.0f / std::sqrt((float)D);
  const std::vector<float> q = test::random_floats((size_t)group * D, 12);  // model dim order
  for (const std::string& name : policy_names()) {
    if (name == "full") continue;
    SCOPED_TRACE(name);
    PolicyOptions o;
    o.attn = name;
    o.dense_layers = {};
    o.synthetic_profile = true;
    auto attend = [&](int64_t budget, std::vector<float>& dense) {  // [group, D] per KV head, both ways
      const std::unique_ptr<AttentionPolicy> made = make_policy(o, *m, nullptr);
      auto* policy = dynamic_cast<SparsePolicy*>(made.get());
      if (policy == nullptr) {  // fail, not crash, if a policy stops being a SparsePolicy
        ADD_FAILURE() << name << " is not a SparsePolicy";
        dense.assign((size_t)c.n_head * D, 0.0f);
        return dense;
      }
      std::vector<KeyLayout> layouts;
      for (int g = 0; g < c.n_head_kv; ++g) layouts.push_back(policy->key_layout(layer, g));
      KvCache cache(1, c.n_head_kv, D, n, layouts);
      cache.fill_random(0, n, 5);
      OwnPick own(*policy, budget);
      FullAttention full;
      std::vector<int32_t> all_rows(n);
      std::iota(all_rows.begin(), all_rows.end(), 0);
      std::vector<float> qg((size_t)group * D), out((size_t)c.n_head * D);
      dense.resize(out.size());
      GroupAttentionScratch scratch;
      for (int g = 0; g < c.n_head_kv; ++g) {
        for (int h = 0; h < group; ++h) cache.permute_query(0, g, &q[(size_t)h * D], &qg[(size_t)h * D]);
        decode_group_attention(own, layer, g, n - 1, cache, 0, qg.data(), group, scale, &out[(size_t)g * group * D],
                               scratch);
        for (const auto& rows : own.picked) {
          if (budget < n) continue;
          EXPECT_EQ(rows.size(), (size_t)n) << "KV head " << g;
          EXPECT_EQ(std::set<int32_t>(rows.begin(), rows.end()), std::set<int32_t>(all_rows.begin(), all_rows.end()));
        }
        decode_group_attention(full, layer, g, n - 1, cache, 0, qg.data(), group, scale,
                               &dense[(size_t)g * group * D], scratch);
      }
      return out;
    };
    std::vector<float> dense;
    const std::vector<float> all = attend(n, dense);
    EXPECT_LE(test::normalized_error(all.data(), dense.data(), dense.size()), 1e-6);
    const std::vector<float> fewer = attend(n - 1, dense);
    EXPECT_GT(test::normalized_error(fewer.data(), dense.data(), dense.size()), 1e-4);
  }
}

// "Sparse attention with budget >= context must equal dense attention", for every policy.
class EveryPolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicy, BudgetCoveringTheContextEqualsFullAttention) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  PolicyOptions o;
  o.attn = GetParam();
  o.budget = Budget::count(1000);
  o.dense_layers = {};
  if (o.attn == "fasa") GTEST_SKIP() << "covered with a calibrated profile in test_fasa";
  o.synthetic_profile = o.attn == "doublesparse";  // (its channels: any set gives dense attention here)
  auto prompt = m->tokenizer.encode("And the evening and the morning were the first day.", true);
  for (DType kv_type : {DType::F16, DType::Q8_0}) {
    SessionOptions so;
    so.cache.types = kv_type;
    Session full(*m, so), sparse(*m, so, make_policy(o, *m, nullptr));
    full.prefill(prompt);
    sparse.prefill(prompt);
    for (int32_t t : {288, 267, 1355}) {
      auto a = full.decode(t);
      std::vector<float> fa(a.begin(), a.end());
      auto b = sparse.decode(t);
      // A K_dom layout (DoubleSparse) sums each key's dot product in two parts (float rounding, 2e-4 as
      // FASA's test) and rounds Q8_0 keys in its own blocks (3.5e-3 measured); other policies are exact.
      const double tol = !policy_info(o.attn).has_k_dom ? 1e-6 : kv_type == DType::Q8_0 ? 1e-2 : 2e-4;
      EXPECT_LE(test::normalized_error(b.data(), fa.data(), fa.size()), tol) << o.attn << " " << dtype_name(kv_type);
    }
  }
  // A small budget does change the output.
  if (o.attn == "full") return;
  o.budget = Budget::count(4);
  Session small(*m, {}, make_policy(o, *m, nullptr)), ref(*m, {});
  small.prefill(prompt);
  ref.prefill(prompt);
  const int32_t t = 288;
  auto r = ref.decode(t);
  const std::vector<float> want(r.begin(), r.end());
  auto b = small.decode(t);
  EXPECT_GT(test::normalized_error(b.data(), want.data(), want.size()), 1e-4) << o.attn;
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicy, ::testing::ValuesIn(policy_names()),
                         [](const auto& info) { return info.param; });

// Each registry row makes a policy of its own name; only full is dense, only FASA and DoubleSparse have
// a K_dom plane.
TEST(Policies, RegistryRowsMatchTheirPolicies) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  for (const PolicyInfo& info : policy_registry()) {
    PolicyOptions o;
    o.attn = info.name;
    o.synthetic_profile = true;
    auto p = make_policy(o, *m, nullptr);
    EXPECT_EQ(p->name(), info.name);
    EXPECT_GT(std::string(info.description).size(), 10u);
    EXPECT_EQ(info.dense, o.attn == "full") << info.name;
    EXPECT_EQ(info.has_k_dom, o.attn == "fasa" || o.attn == "doublesparse") << info.name;
    EXPECT_EQ(p->key_layout(1, 0).n_dom > 0, info.has_k_dom) << info.name;  // layer 0 is dense by default
  }
  EXPECT_EQ(policy_info("quest").description, policy_registry()[5].description);
  EXPECT_THROW(policy_info("nope"), Error);
}

}  // namespace
}  // namespace fasa
