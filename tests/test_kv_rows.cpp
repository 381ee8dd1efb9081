// KV row kernels (F32, F16 and Q8_0 elements) against plain scalar loops on random rows, at lengths
// that exercise the vector bodies and the tails; the rounding each type does against an independent
// reference; and F16 and Q8_0 caches' attention against the reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <random>

#include "kv/kv_cache.h"
#include "ops/attention.h"
#include "ops/kv_rows.h"
#include "fasa/error.h"
#include "test_util.h"

namespace fasa {
namespace {

constexpr DType kKvTypes[] = {DType::F32, DType::F16, DType::Q8_0};

// n_rows rows of `width` elements of x stored as KV rows of type t, one after another.
struct Plane {
  std::vector<uint8_t> bytes;
  size_t row_bytes;
  const void* row(int64_t r) const { return bytes.data() + r * row_bytes; }
};
Plane make_plane(const std::vector<float>& x, int64_t n_rows, int width, DType t) {
  Plane p{std::vector<uint8_t>(n_rows * kv_row_bytes(t, width)), kv_row_bytes(t, width)};
  for (int64_t r = 0; r < n_rows; ++r) kv_store(&x[r * width], t, width, p.bytes.data() + r * p.row_bytes);
  return p;
}

// What each stored element should read back as: F16 rounding, or ggml's Q8_0 (per block of 32 from
// the row's start: d = max |x| / 127 kept as F16, quants rounded half away from zero).
std::vector<float> expected_row(const float* x, int n, DType t) {
  std::vector<float> out(x, x + n);
  if (t == DType::F16)
    for (float& v : out) v = fp16_to_fp32(fp32_to_fp16(v));
  if (t == DType::Q8_0)
    for (int b = 0; b < n; b += 32) {
      float amax = 0;
      for (int i = b; i < std::min(n, b + 32); ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127, half_d = fp16_to_fp32(fp32_to_fp16(d));
      for (int i = b; i < std::min(n, b + 32); ++i) out[i] = (d > 0 ? std::round(x[i] * (1.0f / d)) : 0.0f) * half_d;
    }
  return out;
}

TEST(KvRows, StoreAndLoadRoundAsEachTypeDoes) {
  for (DType t : kKvTypes)
    for (int n : {1, 16, 31, 32, 37, 48, 64, 100}) {
      const auto x = test::random_floats(n, 4 + n, 100.0f);
      const Plane p = make_plane(x, 1, n, t);
      EXPECT_EQ(p.row_bytes, t == DType::Q8_0 ? n + 2 * ((n + 31) / 32) : n * (t == DType::F16 ? 2 : 4));
      std::vector<float> back(n);
      kv_load(p.row(0), t, n, back.data());
      const auto want = expected_row(x.data(), n, t);
      for (int i = 0; i < n; ++i) {
        EXPECT_FLOAT_EQ(back[i], want[i]) << dtype_name(t) << " n=" << n << " i=" << i;
        EXPECT_EQ(kv_row_element(p.row(0), t, i), back[i]);
      }
    }
  std::vector<float> zeros(40, 0.0f), back(40, 1.0f);  // an all-zero block: scale 0, no division by it
  const Plane z = make_plane(zeros, 1, 40, DType::Q8_0);
  kv_load(z.row(0), DType::Q8_0, 40, back.data());
  EXPECT_EQ(back, zeros);
  zeros[35] = NAN;  // a NaN stays visible (as in F16), in its own block only
  kv_load(make_plane(zeros, 1, 40, DType::Q8_0).row(0), DType::Q8_0, 40, back.data());
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_TRUE(std::isnan(back[39]));
}

TEST(KvRows, LoadRowsReadsEachRowOfAPlane) {
  for (DType t : kKvTypes) {
    const int n = 48, rows = 5;
    const auto x = test::random_floats(n * rows, 8, 3.0f);
    const Plane p = make_plane(x, rows, n, t);
    std::vector<float> got(n * rows);
    kv_load_rows(p.row(0), t, n, rows, got.data());
    for (int r = 0; r < rows; ++r) {
      const auto want = expected_row(&x[r * n], n, t);
      for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(got[r * n + i], want[i]) << dtype_name(t);
    }
  }
}

TEST(KvRows, DotAndAddScaledMatchScalarLoops) {
  for (DType t : kKvTypes)
    for (int n : {1, 7, 8, 15, 16, 17, 48, 64, 100, 128}) {
      const auto q = test::random_floats(n, n, 1.5f), x = test::random_floats(n, n + 100, 2.0f);
      const Plane p = make_plane(x, 1, n, t);
      const auto xr = expected_row(x.data(), n, t);
      double ref = 0, magnitude = 0;  // the error is normalised by the sum of the terms' sizes
      for (int i = 0; i < n; ++i) ref += (double)q[i] * xr[i], magnitude += std::fabs((double)q[i] * xr[i]);
      EXPECT_LE(std::fabs(kv_dot(q.data(), p.row(0), t, n) - ref), 1e-5 * magnitude) << dtype_name(t) << " " << n;

      std::vector<float> out = q, want(n);
      for (int i = 0; i < n; ++i) want[i] = q[i] + 0.3f * xr[i];
      kv_add_scaled(out.data(), 0.3f, p.row(0), t, n);
      EXPECT_LE(test::normalized_error(out.data(), want.data(), n), 1e-6) << dtype_name(t) << " " << n;
    }
}

// TIP scores (8 rows at a time, transposed) against one plain dot per row and query, for row ranges
// with tails and K_dom widths the vector path takes (multiples of 8; 8..32 compiled per width) and the
// ones it does not (past 256).
TEST(KvRows, TipScoresMatchPlainDots) {
  for (DType t : kKvTypes)
    for (int nd : {4, 8, 12, 16, 24, 32, 40, 64, 136, 200, 256, 264})
      for (int n_q : {1, 2, 3, 4, 5, 8}) {
        const int rows = 61;
        const auto x = test::random_floats((size_t)rows * nd, nd, 2.0f), q = test::random_floats((size_t)n_q * nd, n_q);
        const Plane plane = make_plane(x, rows, nd, t);
        for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, rows}, {3, 58}, {5, 12}, {45, rows}}) {
          std::vector<float> got((size_t)n_q * (hi - lo)), want(got.size());
          tip_scores(q.data(), n_q, plane.row(0), t, nd, lo, hi, got.data());
          tip_scores_reference(q.data(), n_q, plane.row(0), t, nd, lo, hi, want.data());
          EXPECT_LE(test::normalized_error(got.data(), want.data(), got.size()), 1e-6)
              << dtype_name(t) << " nd=" << nd << " n_q=" << n_q << " rows " << lo << ".." << hi;
        }
      }
}

// FASA's ranking scores: on a Q8_0 plane of one block per row (8..32 dims in whole 8s), integer dots of
// queries rounded to Q8_0, equal to the plain integer reference (8-row vector path up to the plane's
// last row, and tails) and within the queries' rounding of the float scores; on other planes (F16,
// Q8_0 rows of two blocks or of other widths) the float scores.
TEST(KvRows, RankScoresAreInt8DotsOnQ8PlanesAndTipScoresElsewhere) {
  for (DType t : kKvTypes)
    for (int nd : {4, 8, 14, 16, 24, 32, 40})
      for (int n_q : {1, 3, 4, 5}) {
        const int rows = 61;
        const auto x = test::random_floats((size_t)rows * nd, nd, 2.0f), q = test::random_floats((size_t)n_q * nd, n_q);
        const Plane plane = make_plane(x, rows, nd, t);
        for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, rows}, {3, 58}, {5, 12}, {45, rows}}) {
          std::vector<float> got((size_t)n_q * (hi - lo)), want(got.size()), exact(got.size());
          tip_rank_scores(q.data(), n_q, plane.row(0), t, nd, lo, hi, got.data());
          tip_rank_scores_reference(q.data(), n_q, plane.row(0), t, nd, lo, hi, want.data());
          tip_scores_reference(q.data(), n_q, plane.row(0), t, nd, lo, hi, exact.data());
          const std::string what = std::string(dtype_name(t)) + " nd=" + std::to_string(nd) + " n_q=" +
                                   std::to_string(n_q) + " rows " + std::to_string(lo) + ".." + std::to_string(hi);
          const bool int8 = t == DType::Q8_0 && nd <= 32 && nd % 8 == 0;
          EXPECT_LE(test::normalized_error(got.data(), want.data(), got.size()), int8 ? 0.0 : 1e-6) << what;
          const double rounding = test::normalized_error(got.data(), exact.data(), got.size());
          EXPECT_LE(rounding, int8 ? 2e-2 : 1e-6) << what;
          if (int8) {
            EXPECT_GT(rounding, 0.0) << what;  // the queries were rounded
          }
        }
      }
}

// One query against scattered rows, eight at a time, against one plain dot per row: widths the vector
// path takes (multiples of 8) and not, row counts with tails.
TEST(KvRows, DotRowsMatchPlainDots) {
  for (DType t : kKvTypes)
    for (int d : {4, 8, 16, 48, 64, 72})
      for (int n : {1, 7, 8, 9, 61}) {
        const int stored = 100;
        const auto x = test::random_floats((size_t)stored * d, d + n, 2.0f), q = test::random_floats(d, n);
        const Plane plane = make_plane(x, stored, d, t);
        std::vector<const void*> rows(n);
        for (int i = 0; i < n; ++i) rows[i] = plane.row((i * 37) % stored);
        std::vector<float> got(n), want(n);
        kv_dot_rows(q.data(), rows.data(), n, t, d, got.data());
        for (int i = 0; i < n; ++i) want[i] = kv_dot(q.data(), rows[i], t, d);
        EXPECT_LE(test::normalized_error(got.data(), want.data(), n), 1e-6) << dtype_name(t) << " d=" << d << " n=" << n;
      }
}

// Weighted sums of value rows for groups of heads (each register-blocked width and the remainders)
// against one kv_add_scaled per row and head; the rows are scattered, as a gathered block's are.
TEST(KvRows, WeightedRowsMatchAddScaled) {
  for (DType t : kKvTypes)
    for (int d : {8, 40, 64, 72, 128, 256})
      for (int n_q : {1, 2, 3, 4, 5, 8})
        for (int n_rows : {1, 7, 64}) {
          const int stored = 100;
          const auto x = test::random_floats((size_t)stored * d, d + n_rows, 2.0f);
          const auto w = test::random_floats((size_t)n_q * n_rows, n_q, 1.0f);
          const Plane plane = make_plane(x, stored, d, t);
          std::vector<const void*> rows(n_rows);
          for (int i = 0; i < n_rows; ++i) rows[i] = plane.row((i * 37) % stored);
          std::vector<float> got = test::random_floats((size_t)n_q * d, 9), want = got;  // both accumulate
          kv_weighted_rows(w.data(), n_q, rows.data(), n_rows, t, d, got.data());
          kv_weighted_rows_reference(w.data(), n_q, rows.data(), n_rows, t, d, want.data());
          EXPECT_LE(test::normalized_error(got.data(), want.data(), got.size()), 1e-6)
              << dtype_name(t) << " d=" << d << " n_q=" << n_q << " rows=" << n_rows;
        }
}

// --tip-int8: the cache's Q8_0 copy of K_dom is K_dom as stored, quantized, and ranking on it (with
// int8 queries, as FASA ranks) picks nearly the same top rows as ranking on the F16 plane.
TEST(KvRows, Int8TipCopyIsQuantizedKdomAndRanksAlike) {
  const int d = 64, n = 2000, nd = 16, top = 64;
  const auto k = test::random_floats(n * d, 11, 2.0f), v = test::random_floats(n * d, 12);
  KeyLayout layout;
  layout.perm.resize(d);
  std::iota(layout.perm.begin(), layout.perm.end(), 0);
  layout.n_dom = nd;
  KvCache cache(1, 1, d, n, {layout}, KvTypes(DType::F16, DType::F16, true));
  for (int p = 0; p < n; ++p) cache.store(0, 0, p, &k[p * d], &v[p * d]);
  const KvHeadView view = cache.view(0, 0, n);
  ASSERT_NE(view.k_tip, nullptr);
  EXPECT_EQ(view.tip_type(), DType::Q8_0);
  std::vector<float> dom(n * nd);
  kv_load_rows(view.k_dom, DType::F16, nd, n, dom.data());
  const Plane want = make_plane(dom, n, nd, DType::Q8_0);
  EXPECT_EQ(0, std::memcmp(view.k_tip, want.row(0), want.bytes.size()));
  const auto q = test::random_floats(nd, 13);
  std::vector<float> f16(n), int8(n);
  tip_scores(q.data(), 1, view.k_dom, DType::F16, nd, 0, n, f16.data());
  tip_rank_scores(q.data(), 1, view.tip_plane(), view.tip_type(), nd, 0, n, int8.data());
  auto best = [&](const std::vector<float>& s) {
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + top, idx.end(), [&](int a, int b) { return s[a] > s[b]; });
    return std::set<int>(idx.begin(), idx.begin() + top);
  };
  const auto a = best(f16), b = best(int8);
  int shared = 0;
  for (int r : a) shared += (int)b.count(r);
  EXPECT_GE(shared, top * 9 / 10);
  EXPECT_EQ(KvCache(1, 1, d, n, {layout}, KvTypes(DType::Q8_0, DType::F16, true)).view(0, 0, n).k_tip, nullptr);
}

// F16 and Q8_0 caches (and mixed key and value types) in a permuted K_dom | K_rest layout: gathered
// attention equals the reference over the same (rounded) rows, and stays close to the F32 cache's.
TEST(KvRows, RoundedCacheAttentionMatchesReferenceAndFloatCache) {
  const int d = 64, n = 300;
  auto k = test::random_floats(n * d, 3, 2.0f), v = test::random_floats(n * d, 4), q = test::random_floats(d, 5);
  KeyLayout layout;
  layout.perm.resize(d);
  std::iota(layout.perm.begin(), layout.perm.end(), 0);
  std::shuffle(layout.perm.begin(), layout.perm.end(), std::mt19937(2));
  layout.n_dom = 16;
  KvCache full(1, 1, d, n, {layout}, DType::F32);
  for (int p = 0; p < n; ++p) full.store(0, 0, p, &k[p * d], &v[p * d]);
  const float scale = 1.0f / 8;
  for (KvTypes types : {KvTypes(DType::F16), KvTypes(DType::Q8_0), KvTypes(DType::Q8_0, DType::F16),
                        KvTypes(DType::F16, DType::Q8_0)}) {
    SCOPED_TRACE(std::string(dtype_name(types.k)) + "/" + dtype_name(types.v));
    KvCache rounded(1, 1, d, n, {layout}, types);
    EXPECT_EQ(rounded.bytes(), n * (kv_row_bytes(types.k, 16) + kv_row_bytes(types.k, 48) + kv_row_bytes(types.v, 64)));
    for (int p = 0; p < n; ++p) rounded.store(0, 0, p, &k[p * d], &v[p * d]);
    std::vector<float> qp(d), got(d), ref(d), f32(d), q32(d);
    rounded.permute_query(0, 0, q.data(), qp.data());
    full.permute_query(0, 0, q.data(), q32.data());
    gathered_attention(qp.data(), rounded.view(0, 0, n), nullptr, n, scale, got.data());
    attention_reference(qp.data(), rounded.view(0, 0, n), nullptr, n, scale, ref.data());
    gathered_attention(q32.data(), full.view(0, 0, n), nullptr, n, scale, f32.data());
    EXPECT_LE(test::normalized_error(got.data(), ref.data(), d), 1e-5);
    const bool q8 = types.k == DType::Q8_0 || types.v == DType::Q8_0;
    EXPECT_LE(test::normalized_error(got.data(), f32.data(), d), q8 ? 3e-2 : 1e-2);
    EXPECT_GT(test::normalized_error(got.data(), f32.data(), d), 0.0);  // the rounding is really there
    const KvHeadView view = rounded.view(0, 0, n);
    std::vector<float> key(d);
    for (int i = 0; i < d; ++i) key[i] = k[7 * d + layout.perm[i]];
    const auto dom = expected_row(key.data(), 16, types.k), rest = expected_row(key.data() + 16, 48, types.k);
    for (int i = 0; i < d; ++i) EXPECT_FLOAT_EQ(view.key(7, i), i < 16 ? dom[i] : rest[i - 16]);
  }
}

}  // namespace
}  // namespace fasa
