// Gathered attention (online softmax) against the plain two-pass reference on random data; a full
// selection in any order must equal dense attention.
#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "ops/attention.h"
#include "ops/causal_attention.h"
#include "ops/dtype.h"
#include "model/session.h"
#include "bench/synthetic_model.h"
#include "fasa/error.h"
#include "test_util.h"

namespace fasa {
namespace {

struct RandomKv {
  std::vector<float> k, v;  // [n, d]
  KvHeadView view;
  RandomKv(int64_t n, int d, uint32_t seed) : k(test::random_floats(n * d, seed, 2.0f)), v(test::random_floats(n * d, seed + 1)) {
    view = {nullptr, k.data(), v.data(), n, d, 0};
  }
};

TEST(Attention, GatheredMatchesReferenceOnSubsets) {
  for (int d : {8, 64, 128}) {
    RandomKv kv(500, d, 3);
    auto q = test::random_floats(d, 9, 1.5f);
    std::mt19937 rng(d);
    for (int64_t m : {1, 7, 100, 500}) {
      std::vector<int32_t> rows(500);
      std::iota(rows.begin(), rows.end(), 0);
      std::shuffle(rows.begin(), rows.end(), rng);
      rows.resize(m);
      std::vector<float> got(d), ref(d);
      const float scale = 1.0f / std::sqrt((float)d);
      gathered_attention(q.data(), kv.view, rows.data(), m, scale, got.data());
      attention_reference(q.data(), kv.view, rows.data(), m, scale, ref.data());
      EXPECT_LE(test::normalized_error(got.data(), ref.data(), d), 1e-5) << "d=" << d << " m=" << m;
    }
  }
}

TEST(Attention, FullSelectionInAnyOrderEqualsDense) {
  const int d = 64;
  RandomKv kv(300, d, 5);
  auto q = test::random_floats(d, 2);
  std::vector<float> dense(d), gathered(d);
  gathered_attention(q.data(), kv.view, nullptr, 300, 0.125f, dense.data());
  std::vector<int32_t> rows(300);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), std::mt19937(1));
  gathered_attention(q.data(), kv.view, rows.data(), 300, 0.125f, gathered.data());
  EXPECT_LE(test::normalized_error(gathered.data(), dense.data(), d), 1e-6);
  std::vector<float> ref(d);
  attention_reference(q.data(), kv.view, nullptr, 300, 0.125f, ref.data());
  EXPECT_LE(test::normalized_error(dense.data(), ref.data(), d), 1e-5);
}

// Keys split into K_dom | K_rest planes in a permuted dim order, with the query permuted alike,
// give the same attention as the identity layout.
TEST(Attention, SplitKeyPlanesEqualIdentityLayout) {
  const int d = 32, n = 40;
  auto k = test::random_floats(n * d, 3), v = test::random_floats(n * d, 4), q = test::random_floats(d, 5);
  KeyLayout layout;
  layout.perm.resize(d);
  std::iota(layout.perm.begin(), layout.perm.end(), 0);
  std::shuffle(layout.perm.begin(), layout.perm.end(), std::mt19937(2));
  layout.n_dom = 10;
  KvCache plain(1, 1, d, n, {}, DType::F32), split(1, 1, d, n, {layout}, DType::F32);
  for (int p = 0; p < n; ++p) {
    plain.store(0, 0, p, &k[p * d], &v[p * d]);
    split.store(0, 0, p, &k[p * d], &v[p * d]);
  }
  std::vector<float> qp(d), a(d), b(d), r(d);
  split.permute_query(0, 0, q.data(), qp.data());
  EXPECT_EQ(split.view(0, 0, n).n_dom, 10);
  gathered_attention(q.data(), plain.view(0, 0, n), nullptr, n, 0.2f, a.data());
  gathered_attention(qp.data(), split.view(0, 0, n), nullptr, n, 0.2f, b.data());
  attention_reference(qp.data(), split.view(0, 0, n), nullptr, n, 0.2f, r.data());
  EXPECT_LE(test::normalized_error(b.data(), a.data(), d), 1e-6);
  EXPECT_LE(test::normalized_error(r.data(), a.data(), d), 1e-5);
  EXPECT_NEAR(key_dot(qp.data(), split.view(0, 0, n), 7), dot_f32(q.data(), &k[7 * d], d), 1e-4);
}

// Prefill's block kernel: position i of a block sees first_len + i rows; each position and head equals
// its reference, across block edges, for split key planes, F32, F16 and Q8_0, widths without whole
// vectors.
TEST(Attention, CausalBlockEqualsEachPositionsReference) {
  const int64_t n = 300;
  for (int d : {64, 72})
    for (DType type : {DType::F32, DType::F16, DType::Q8_0})
      for (int n_dom : {0, 16}) {
        KeyLayout layout;
        layout.perm.resize(d);
        std::iota(layout.perm.begin(), layout.perm.end(), 0);
        std::shuffle(layout.perm.begin(), layout.perm.end(), std::mt19937(d));
        layout.n_dom = n_dom;
        auto k = test::random_floats(n * d, 21, 2.0f), v = test::random_floats(n * d, 22);
        KvCache cache(1, 1, d, n, {layout}, type);
        for (int64_t p = 0; p < n; ++p) cache.store(0, 0, p, &k[p * d], &v[p * d]);
        const KvHeadView kv = cache.view(0, 0, n);
        for (auto [n_pos, n_qh, first_len] : {std::tuple{1, 1, 1}, {8, 4, 1}, {8, 4, 60}, {5, 7, 128}, {3, 2, 200},
                                              {32, 1, 64}, {9, 3, 292}}) {
          const int64_t stride = (int64_t)n_qh * d + 5;  // rows of the output wider than the heads
          auto q = test::random_floats((size_t)n_pos * n_qh * d, n_pos + n_qh, 1.5f);
          std::vector<float> out(n_pos * stride, -7.0f), ref(d);
          causal_block_attention(q.data(), n_pos, n_qh, kv, first_len, 0.125f, out.data(), stride);
          for (int i = 0; i < n_pos; ++i) {
            for (int h = 0; h < n_qh; ++h) {
              attention_reference(&q[((size_t)i * n_qh + h) * d], kv, nullptr, first_len + i, 0.125f, ref.data());
              EXPECT_LE(test::normalized_error(&out[i * stride + h * d], ref.data(), d), 1e-5)
                  << dtype_name(type) << " d=" << d << " n_dom=" << n_dom << " position " << i << " of " << n_pos
                  << " head " << h << " first_len=" << first_len;
            }
            for (int64_t c = (int64_t)n_qh * d; c < stride; ++c) EXPECT_EQ(out[i * stride + c], -7.0f);  // untouched
          }
        }
      }
}

// A sliding window: position i sees only the last `window` of its first_len + i rows.
TEST(Attention, CausalBlockWithAWindowEqualsEachPositionsReferenceOverItsWindow) {
  const int64_t n = 300;
  const int d = 64;
  auto k = test::random_floats(n * d, 23, 2.0f), v = test::random_floats(n * d, 24);
  KvCache cache(1, 1, d, n, {}, DType::F16);
  for (int64_t p = 0; p < n; ++p) cache.store(0, 0, p, &k[p * d], &v[p * d]);
  const KvHeadView kv = cache.view(0, 0, n);
  for (int64_t window : {1, 5, 64, 100, 1000})
    for (auto [n_pos, n_qh, first_len] : {std::tuple{8, 4, 1}, {8, 4, 60}, {32, 1, 64}, {9, 3, 200}, {40, 2, 250}}) {
      auto q = test::random_floats((size_t)n_pos * n_qh * d, n_pos + n_qh, 1.5f);
      std::vector<float> out((size_t)n_pos * n_qh * d), ref(d);
      causal_block_attention(q.data(), n_pos, n_qh, kv, first_len, 0.125f, out.data(), n_qh * d, window);
      for (int i = 0; i < n_pos; ++i)
        for (int h = 0; h < n_qh; ++h) {
          const int64_t end = first_len + i, lo = std::max<int64_t>(0, end - window);
          attention_reference(&q[((size_t)i * n_qh + h) * d], kv.from_row(lo), nullptr, end - lo, 0.125f, ref.data());
          EXPECT_LE(test::normalized_error(&out[((size_t)i * n_qh + h) * d], ref.data(), d), 1e-5)
              << "window " << window << " position " << i << " of " << n_pos << " head " << h << " first_len=" << first_len;
        }
    }
}

// A ring layer keeps its last positions, each twice, so that any of them in a row are one view.
TEST(Attention, RingCacheViewsHoldTheLastPositionsInOrder) {
  const int d = 16, ring = 24;
  const int64_t n = 100;
  auto k = test::random_floats(n * d, 25), v = test::random_floats(n * d, 26);
  KvCache cache(2, 1, d, n, {}, DType::F32, {}, {0, ring});
  std::vector<float> row(d);
  for (int64_t p = 0; p < n; ++p) {
    for (int l = 0; l < 2; ++l) cache.store(l, 0, p, &k[p * d], &v[p * d]);
    for (int64_t begin : {p + 1 - ring, p - 7, p}) {
      if (begin < 0) continue;
      const KvHeadView kv = cache.view(1, 0, begin, p + 1);
      ASSERT_EQ(kv.n_tokens, p + 1 - begin);
      for (int64_t r = 0; r < kv.n_tokens; ++r) {
        kv_load(kv.k_rest_row(r), DType::F32, d, row.data());
        ASSERT_EQ(row, std::vector<float>(&k[(begin + r) * d], &k[(begin + r + 1) * d])) << p << " " << begin;
        kv_load(kv.v_row(r), DType::F32, d, row.data());
        ASSERT_EQ(row, std::vector<float>(&v[(begin + r) * d], &v[(begin + r + 1) * d])) << p << " " << begin;
      }
    }
  }
  EXPECT_THROW(cache.view(1, 0, 50, 50 + ring + 1), Error);  // more than the ring holds
  EXPECT_EQ(cache.ring(0), 0);
  EXPECT_EQ(cache.ring(1), ring);
  EXPECT_LT(cache.bytes(), 2 * (size_t)n * d * 4 * 2);  // layer 1 holds 2 x 24 rows, not 100
}

TEST(Attention, CausalBlockRefusesRowsItDoesNotHave) {
  RandomKv kv(10, 8, 1);
  auto q = test::random_floats(4 * 8, 2);
  std::vector<float> out(4 * 8);
  EXPECT_THROW(causal_block_attention(q.data(), 4, 1, kv.view, 8, 1.0f, out.data(), 8), Error);  // needs 11 rows
  EXPECT_THROW(causal_block_attention(q.data(), 4, 1, kv.view, 0, 1.0f, out.data(), 8), Error);  // sees no row
}

// A prompt longer than kBlockedPrefillRows, prefilled in chunks that start anywhere in a block, gives
// the logits of stepping through it one token at a time (the decode step's kernel).
TEST(Attention, LongPrefillEqualsSteppingThroughIt) {
  const ModelShape shape{"tiny", "llama", 2, 64, 4, 2, 96, 300, 2048, 10000.0f, 0.0f, false};
  const std::string path = test::temp_dir() + "/long-prefill.gguf";
  write_synthetic_model(shape, DType::F32, path, 4);
  auto m = load_model(path);
  const int64_t n = kBlockedPrefillRows + 77;
  std::vector<int32_t> prompt(n);
  std::mt19937 rng(6);
  for (auto& t : prompt) t = 3 + (int32_t)(rng() % 290);
  SessionOptions o;
  o.cache.types = {DType::F32, DType::F32};
  o.n_ubatch = 100;
  Session batched(*m, o), stepwise(*m, o);
  std::vector<float> all;
  batched.prefill(prompt, &all);
  const size_t V = m->config.n_vocab;
  for (int64_t t = 0; t < n; ++t) {
    auto l = stepwise.decode(prompt[t]);
    if (t < kBlockedPrefillRows - 40) continue;
    EXPECT_LE(test::normalized_error(l.data(), &all[t * V], V), 1e-5) << "position " << t;
  }
}

// Query heads sharing a KV head, attended in one pass over the rows, each equal their reference.
TEST(Attention, GroupedEqualsEachHeadsReference) {
  const int d = 64, n = 200;
  auto k = test::random_floats(n * d, 3, 2.0f), v = test::random_floats(n * d, 4);
  std::vector<int32_t> subset(n);
  std::iota(subset.begin(), subset.end(), 0);
  std::shuffle(subset.begin(), subset.end(), std::mt19937(3));
  subset.resize(50);
  KeyLayout split;  // a K_dom plane of 16 dims (8 chunks) in a shuffled order, as FASA lays keys out
  split.perm.resize(d);
  std::iota(split.perm.begin(), split.perm.end(), 0);
  std::shuffle(split.perm.begin(), split.perm.end(), std::mt19937(4));
  split.n_dom = 16;
  for (DType type : {DType::F32, DType::F16, DType::Q8_0})
    for (const KeyLayout& layout : {KeyLayout{}, split}) {
      KvCache cache(1, 1, d, n, {layout}, type);
      for (int p = 0; p < n; ++p) cache.store(0, 0, p, &k[p * d], &v[p * d]);
      const KvHeadView kv = cache.view(0, 0, n);
      for (int n_q : {1, 2, 3, 4, 5})
        for (const int32_t* rows : {(const int32_t*)nullptr, (const int32_t*)subset.data()}) {
          const int64_t m = rows ? (int64_t)subset.size() : n;
          auto q = test::random_floats((size_t)n_q * d, n_q, 1.5f);
          std::vector<float> out((size_t)n_q * d), ref(d);
          grouped_attention(q.data(), n_q, kv, rows, m, 0.125f, out.data());
          for (int h = 0; h < n_q; ++h) {
            attention_reference(&q[(size_t)h * d], kv, rows, m, 0.125f, ref.data());
            EXPECT_LE(test::normalized_error(&out[(size_t)h * d], ref.data(), d), 1e-5)
                << dtype_name(type) << " n_dom=" << kv.n_dom << " n_q=" << n_q << " head " << h
                << (rows ? " subset" : " all");
          }
        }
    }
}

// Flash-decoding: the rows cut into slices that run as tasks on a team of threads, merged, equal
// the one-pass result and the reference — for all rows and for a gathered subset, F32, F16 and Q8_0.
TEST(Attention, SplitOverTheRowsEqualsOnePass) {
  const int d = 64, n_q = 4;
  const int64_t n = 3 * 4096 + 1000;
  auto k = test::random_floats(n * d, 11, 2.0f), v = test::random_floats(n * d, 12);
  auto q = test::random_floats((size_t)n_q * d, 13, 1.5f);
  std::vector<int32_t> subset(n);
  std::iota(subset.begin(), subset.end(), 0);
  std::shuffle(subset.begin(), subset.end(), std::mt19937(5));
  subset.resize(9000);
  for (DType type : {DType::F32, DType::F16, DType::Q8_0}) {
    KvCache cache(1, 1, d, n, {}, type);
    for (int64_t p = 0; p < n; ++p) cache.store(0, 0, p, &k[p * d], &v[p * d]);
    const KvHeadView kv = cache.view(0, 0, n);
    for (const int32_t* rows : {(const int32_t*)nullptr, (const int32_t*)subset.data()}) {
      const int64_t m = rows ? (int64_t)subset.size() : n;
      std::vector<float> split((size_t)n_q * d), whole(split.size()), ref(d);
#pragma omp parallel num_threads(4)
#pragma omp single
      split_grouped_attention(q.data(), n_q, kv, rows, m, 0.125f, split.data());
      grouped_attention(q.data(), n_q, kv, rows, m, 0.125f, whole.data());
      for (int h = 0; h < n_q; ++h) {
        attention_reference(&q[(size_t)h * d], kv, rows, m, 0.125f, ref.data());
        const float* got = &split[(size_t)h * d];
        EXPECT_LE(test::normalized_error(got, &whole[(size_t)h * d], d), 1e-5) << dtype_name(type) << " head " << h;
        EXPECT_LE(test::normalized_error(got, ref.data(), d), 1e-5) << dtype_name(type) << " head " << h;
      }
    }
  }
}

TEST(Attention, SubsetDiffersFromDense) {  // the comparison above can fail
  const int d = 16;
  RandomKv kv(50, d, 8);
  auto q = test::random_floats(d, 4, 3.0f);
  std::vector<float> dense(d), part(d);
  gathered_attention(q.data(), kv.view, nullptr, 50, 1.0f, dense.data());
  std::vector<int32_t> rows = {0, 10, 20};
  gathered_attention(q.data(), kv.view, rows.data(), 3, 1.0f, part.data());
  EXPECT_GT(test::normalized_error(part.data(), dense.data(), d), 1e-3);
}

TEST(Attention, WeightsAreTheSoftmaxGatheredAttentionUses) {
  const int d = 16;
  RandomKv kv(60, d, 11);
  auto q = test::random_floats(d, 12);
  std::vector<int32_t> rows = {3, 59, 0, 17, 40};
  std::vector<double> p(rows.size());
  attention_weights(q.data(), kv.view, rows.data(), (int64_t)rows.size(), p.data());
  std::vector<float> mixed(d, 0.0f), out(d);
  double total = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    total += p[j];
    for (int i = 0; i < d; ++i) mixed[i] += (float)p[j] * kv.v[rows[j] * d + i];
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  gathered_attention(q.data(), kv.view, rows.data(), (int64_t)rows.size(), 1.0f / std::sqrt((float)d), out.data());
  EXPECT_LE(test::normalized_error(mixed.data(), out.data(), d), 1e-5);
}

TEST(Attention, SingleRowReturnsItsValue) {
  RandomKv kv(4, 8, 1);
  auto q = test::random_floats(8, 2);
  std::vector<float> out(8);
  int32_t row = 2;
  gathered_attention(q.data(), kv.view, &row, 1, 1.0f, out.data());
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[i], kv.v[2 * 8 + i]);
}

}  // namespace
}  // namespace fasa
