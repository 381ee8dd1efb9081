// KV row kernels (F32 and F16 elements) against plain scalar loops on random rows, at lengths that
// exercise the vector bodies and the tails; and an F16 cache's attention against the reference.
#include <algorithm>
#include <numeric>
#include <random>

#include "kv/kv_cache.h"
#include "ops/attention.h"
#include "ops/kv_rows.h"
#include "fasa/error.h"
#include "test_util.h"

namespace fasa {
namespace {

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = fp32_to_fp16(x[i]);
  return h;
}

TEST(KvRows, DotAndAddScaledMatchScalarLoops) {
  for (int n : {1, 7, 8, 15, 16, 17, 64, 100, 128}) {
    const auto q = test::random_floats(n, n, 1.5f), x = test::random_floats(n, n + 100, 2.0f);
    const auto h = to_f16(x);
    double ref32 = 0, ref16 = 0;
    for (int i = 0; i < n; ++i) ref32 += (double)q[i] * x[i], ref16 += (double)q[i] * fp16_to_fp32(h[i]);
    EXPECT_NEAR(kv_dot(q.data(), x.data(), DType::F32, n), ref32, 1e-4 * n) << n;
    EXPECT_NEAR(kv_dot(q.data(), h.data(), DType::F16, n), ref16, 1e-4 * n) << n;

    std::vector<float> out32 = q, out16 = q, want32(n), want16(n);
    for (int i = 0; i < n; ++i) want32[i] = q[i] + 0.3f * x[i], want16[i] = q[i] + 0.3f * fp16_to_fp32(h[i]);
    kv_add_scaled(out32.data(), 0.3f, x.data(), DType::F32, n);
    kv_add_scaled(out16.data(), 0.3f, h.data(), DType::F16, n);
    EXPECT_LE(test::normalized_error(out32.data(), want32.data(), n), 1e-6) << n;
    EXPECT_LE(test::normalized_error(out16.data(), want16.data(), n), 1e-6) << n;
  }
}

TEST(KvRows, StoreRoundsToHalfAndLoadReadsItBack) {
  const int n = 37;
  const auto x = test::random_floats(n, 4, 100.0f);
  std::vector<uint16_t> h(n);
  kv_store(x.data(), DType::F16, n, h.data());
  EXPECT_EQ(h, to_f16(x));
  std::vector<float> back(n), f32(n);
  kv_load(h.data(), DType::F16, n, back.data());
  for (int i = 0; i < n; ++i) EXPECT_EQ(back[i], fp16_to_fp32(h[i]));
  kv_store(x.data(), DType::F32, n, f32.data());
  EXPECT_EQ(f32, x);
  EXPECT_EQ(kv_type_from_name("f16"), DType::F16);
  EXPECT_EQ(kv_type_from_name("f32"), DType::F32);
  EXPECT_THROW(kv_type_from_name("q8_0"), Error);
}

// TIP scores (8 rows at a time, transposed) against one plain dot per row and query, for row ranges
// with tails and K_dom widths the vector path takes (multiples of 8; 8..32 compiled per width) and the
// ones it does not.
TEST(KvRows, TipScoresMatchPlainDots) {
  for (DType t : {DType::F32, DType::F16})
    for (int nd : {4, 8, 12, 16, 24, 32, 64})
      for (int n_q : {1, 2, 3, 4, 5, 8}) {
        const int rows = 61;
        const auto x = test::random_floats((size_t)rows * nd, nd, 2.0f), q = test::random_floats((size_t)n_q * nd, n_q);
        const auto h = to_f16(x);
        const void* plane = t == DType::F16 ? (const void*)h.data() : (const void*)x.data();
        for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, rows}, {3, 58}, {5, 12}}) {
          std::vector<float> got((size_t)n_q * (hi - lo)), want(got.size());
          tip_scores(q.data(), n_q, plane, t, nd, lo, hi, got.data());
          tip_scores_reference(q.data(), n_q, plane, t, nd, lo, hi, want.data());
          EXPECT_LE(test::normalized_error(got.data(), want.data(), got.size()), 1e-6)
              << dtype_name(t) << " nd=" << nd << " n_q=" << n_q << " rows " << lo << ".." << hi;
        }
      }
}

// One query against scattered rows, eight at a time, against one plain dot per row: widths the vector
// path takes (multiples of 8) and not, row counts with tails.
TEST(KvRows, DotRowsMatchPlainDots) {
  for (DType t : {DType::F32, DType::F16})
    for (int d : {4, 8, 16, 48, 64, 72})
      for (int n : {1, 7, 8, 9, 61}) {
        const int stored = 100;
        const auto x = test::random_floats((size_t)stored * d, d + n, 2.0f), q = test::random_floats(d, n);
        const auto h = to_f16(x);
        std::vector<const void*> rows(n);
        for (int i = 0; i < n; ++i) {
          const size_t at = (size_t)((i * 37) % stored) * d;
          rows[i] = t == DType::F16 ? (const void*)&h[at] : (const void*)&x[at];
        }
        std::vector<float> got(n), want(n);
        kv_dot_rows(q.data(), rows.data(), n, t, d, got.data());
        for (int i = 0; i < n; ++i) want[i] = kv_dot(q.data(), rows[i], t, d);
        EXPECT_LE(test::normalized_error(got.data(), want.data(), n), 1e-6) << dtype_name(t) << " d=" << d << " n=" << n;
      }
}

// Weighted sums of value rows for groups of heads (each register-blocked width and the remainders)
// against one kv_add_scaled per row and head; the rows are scattered, as a gathered block's are.
TEST(KvRows, WeightedRowsMatchAddScaled) {
  for (DType t : {DType::F32, DType::F16})
    for (int d : {8, 40, 64, 72, 128})
      for (int n_q : {1, 2, 3, 4, 5, 8})
        for (int n_rows : {1, 7, 64}) {
          const int stored = 100;
          const auto x = test::random_floats((size_t)stored * d, d + n_rows, 2.0f);
          const auto w = test::random_floats((size_t)n_q * n_rows, n_q, 1.0f);
          const auto h = to_f16(x);
          std::vector<const void*> rows(n_rows);
          for (int i = 0; i < n_rows; ++i) {
            const size_t at = (size_t)((i * 37) % stored) * d;
            rows[i] = t == DType::F16 ? (const void*)&h[at] : (const void*)&x[at];
          }
          std::vector<float> got = test::random_floats((size_t)n_q * d, 9), want = got;  // both accumulate
          kv_weighted_rows(w.data(), n_q, rows.data(), n_rows, t, d, got.data());
          kv_weighted_rows_reference(w.data(), n_q, rows.data(), n_rows, t, d, want.data());
          EXPECT_LE(test::normalized_error(got.data(), want.data(), got.size()), 1e-6)
              << dtype_name(t) << " d=" << d << " n_q=" << n_q << " rows=" << n_rows;
        }
}

// An F16 cache in a permuted K_dom | K_rest layout: gathered attention equals the reference over
// the same (rounded) rows, and stays close to the F32 cache's attention.
TEST(KvRows, HalfCacheAttentionMatchesReferenceAndFloatCache) {
  const int d = 64, n = 300;
  auto k = test::random_floats(n * d, 3, 2.0f), v = test::random_floats(n * d, 4), q = test::random_floats(d, 5);
  KeyLayout layout;
  layout.perm.resize(d);
  std::iota(layout.perm.begin(), layout.perm.end(), 0);
  std::shuffle(layout.perm.begin(), layout.perm.end(), std::mt19937(2));
  layout.n_dom = 16;
  KvCache half(1, 1, d, n, {layout}, DType::F16), full(1, 1, d, n, {layout}, DType::F32);
  EXPECT_EQ(half.bytes() * 2, full.bytes());
  for (int p = 0; p < n; ++p) {
    half.store(0, 0, p, &k[p * d], &v[p * d]);
    full.store(0, 0, p, &k[p * d], &v[p * d]);
  }
  std::vector<float> qp(d), got(d), ref(d), f32(d);
  half.permute_query(0, 0, q.data(), qp.data());
  const float scale = 1.0f / 8;
  gathered_attention(qp.data(), half.view(0, 0, n), nullptr, n, scale, got.data());
  attention_reference(qp.data(), half.view(0, 0, n), nullptr, n, scale, ref.data());
  gathered_attention(qp.data(), full.view(0, 0, n), nullptr, n, scale, f32.data());
  EXPECT_LE(test::normalized_error(got.data(), ref.data(), d), 1e-5);
  EXPECT_LE(test::normalized_error(got.data(), f32.data(), d), 1e-2);
  EXPECT_GT(test::normalized_error(got.data(), f32.data(), d), 0.0);  // the rounding is really there
  const KvHeadView view = half.view(0, 0, n);
  for (int i = 0; i < d; ++i) EXPECT_EQ(view.key(7, i), fp16_to_fp32(fp32_to_fp16(k[7 * d + layout.perm[i]])));
}

}  // namespace
}  // namespace fasa
