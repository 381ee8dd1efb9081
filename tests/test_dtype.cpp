// Element types: fp16/bf16 conversions and each type's dequantize/dot kernel against a scalar
// reference written here from the block layout.
#include <algorithm>
#include <cmath>

#include "ops/dtype.h"
#include "ops/dtype_kernels.h"
#include "ops/matmul.h"
#include "ops/packed_layout.h"
#include "ops/packed_rows.h"
#include "ops/quant_dot.h"
#include "ops/quant_tiles.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

TEST(Fp16, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32((uint16_t)h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, ConversionMatchesCompilerHalf) {
#ifndef __FLT16_MAX__  // clang before 15 has no _Float16 on x86
  GTEST_SKIP() << "this compiler has no _Float16: skipped";
#else
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = fp32_from_bits(bits(rng));
    if (std::isnan(f)) continue;
    _Float16 ref = (_Float16)f;
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(fp32_to_fp16(f), ref_bits) << f;
    ASSERT_EQ(fp16_to_fp32(ref_bits), (float)ref);
  }
#endif
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
}

// --- scalar references written from ggml's block layouts ---

float ref_q8_0(const uint8_t* row, int64_t i) {
  const uint8_t* b = row + (i / 32) * 34;
  uint16_t d;
  std::memcpy(&d, b, 2);
  return fp16_to_fp32(d) * (float)(int8_t)b[2 + i % 32];
}

float ref_q4_0(const uint8_t* row, int64_t i) {
  const uint8_t* b = row + (i / 32) * 18;
  uint16_t d;
  std::memcpy(&d, b, 2);
  const int j = i % 32;
  const int nib = j < 16 ? (b[2 + j] & 0xf) : (b[2 + j - 16] >> 4);
  return fp16_to_fp32(d) * (float)(nib - 8);
}

float ref_element(DType t, const std::string& row, int64_t i) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(row.data());
  uint16_t h;
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DType::F16: std::memcpy(&h, p + 2 * i, 2); return fp16_to_fp32(h);
    case DType::BF16: std::memcpy(&h, p + 2 * i, 2); return bf16_to_fp32(h);
    case DType::Q8_0: return ref_q8_0(p, i);
    case DType::Q4_0: return ref_q4_0(p, i);
    default: ADD_FAILURE() << "no reference"; return 0;
  }
}

// Random bytes of a valid row: scales are sane halves, quants anything.
std::string random_row(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string row(dtype_bytes(t, n), '\0');
  for (auto& c : row) c = (char)(rng() & 0xff);
  auto put_half = [&](size_t at, float v) {
    uint16_t h = t == DType::BF16 ? fp32_to_bf16(v) : fp32_to_fp16(v);
    std::memcpy(&row[at], &h, 2);
  };
  std::normal_distribution<float> nd(0, 1);
  switch (t) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) { float f = nd(rng); std::memcpy(&row[4 * i], &f, 4); }
      break;
    case DType::F16: case DType::BF16:
      for (int64_t i = 0; i < n; ++i) put_half(2 * i, nd(rng));
      break;
    case DType::Q8_0: for (int64_t b = 0; b < n / 32; ++b) put_half(b * 34, 0.01f * nd(rng)); break;
    case DType::Q4_0: for (int64_t b = 0; b < n / 32; ++b) put_half(b * 18, 0.1f * nd(rng)); break;
    case DType::Q5_0: for (int64_t b = 0; b < n / 32; ++b) put_half(b * 22, 0.1f * nd(rng)); break;
    case DType::Q4_1: case DType::Q5_1: {  // d and m
      const size_t bb = t == DType::Q4_1 ? 20 : 24;
      for (int64_t b = 0; b < n / 32; ++b) put_half(b * bb, 0.1f * nd(rng)), put_half(b * bb + 2, -0.5f * std::fabs(nd(rng)));
      break;
    }
    default: break;
  }
  return row;
}

class KernelTest : public ::testing::TestWithParam<DType> {};

TEST_P(KernelTest, DequantizeMatchesReferenceExactly) {
  const DType t = GetParam();
  for (int64_t n : {32, 256, 288, 1024}) {
    std::string row = random_row(t, n, (uint32_t)n);
    std::vector<float> out(n);
    dequantize_row(t, row.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ref_element(t, row, i)) << dtype_name(t) << " i=" << i;
  }
}

TEST_P(KernelTest, DotMatchesReference) {
  const DType t = GetParam();
  for (int64_t n : {32, 256, 288, 4096}) {
    std::string row = random_row(t, n, 11 + (uint32_t)n);
    auto x = test::random_floats(n, 3);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += (double)ref_element(t, row, i) * x[i];
      mag += std::fabs((double)ref_element(t, row, i) * x[i]);
    }
    const float got = dot_row(t, row.data(), x.data(), n);
    EXPECT_LE(std::fabs(got - ref), 1e-5 * mag + 1e-7) << dtype_name(t) << " n=" << n;
  }
}

TEST_P(KernelTest, MatmulMatchesReferenceForOneAndManyTokens) {
  const DType t = GetParam();
  // rows: whole panels (of 32 or 16) and a partial one; float rows also end past the last whole vector
  const int64_t rows = 37, cols = dtype_traits((uint32_t)t)->block == 1 ? 330 : 320;
  std::string data;
  for (int r = 0; r < rows; ++r) data += random_row(t, cols, 100 + r);
  Matrix W{t, rows, cols, dtype_bytes(t, cols), reinterpret_cast<const uint8_t*>(data.data())};
  for (int n : {1, 5, 8, 11, 23}) {  // tokens: single, small batches, and panels of 6 with a remainder
    auto X = test::random_floats((size_t)n * cols, 9);
    std::vector<float> Y(n * rows), R(n * rows);
    matmul(W, X.data(), n, Y.data());
    matmul_reference(W, X.data(), n, R.data());
    EXPECT_LE(test::normalized_error(Y.data(), R.data(), Y.size()), 1e-5) << dtype_name(t) << " n=" << n;
  }
}

// Small batches give each token exactly what a batch of one gives it (sequences decoded together equal
// each decoded alone): the row read once, each token's sums in the one-token kernel's order.
TEST_P(KernelTest, SmallBatchesGiveEachTokenItsOwnResult) {
  const DType t = GetParam();
  const int64_t rows = 21, cols = dtype_traits((uint32_t)t)->block == 1 ? 330 : 320;
  std::string data;
  for (int r = 0; r < rows; ++r) data += random_row(t, cols, 500 + r);
  const Matrix W{t, rows, cols, dtype_bytes(t, cols), reinterpret_cast<const uint8_t*>(data.data())};
  const int n_max = kMatmulSmallBatch;
  auto X = test::random_floats((size_t)n_max * cols, 19);
  std::vector<float> one(n_max * rows);
  for (int k = 0; k < n_max; ++k) matmul(W, &X[(size_t)k * cols], 1, &one[(size_t)k * rows]);
  for (int n = 2; n <= n_max; ++n) {
    std::vector<float> Y(n * rows);
    matmul(W, X.data(), n, Y.data());
    for (int i = 0; i < n * rows; ++i) ASSERT_EQ(Y[i], one[i]) << dtype_name(t) << " batch " << n << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Activations rounded as llama.cpp rounds them: Q8_0 (32 per fp16 scale) and Q8_K (256 per float scale).
// Error: half a step, plus up to 127 x the fp16 rounding of a Q8_0 scale (2^-11 relative).
TEST(QuantizedActs, RoundToInt8WithinHalfAStep) {
  for (DType w : {DType::Q4_0, DType::Q6_K}) {
    const int group = w == DType::Q6_K ? 256 : 32;
    auto x = test::random_floats(1024, 21, 3.0f);
    for (int j = 512; j < 512 + group; ++j) x[j] = 0;  // an all-zero group
    QuantizedActs q;
    quantize_acts(w, x.data(), 1024, q);
    ASSERT_EQ(q.group, group);
    for (int g = 0; g < 1024 / group; ++g) {
      int qmax = 0;
      for (int j = g * group; j < (g + 1) * group; ++j) {
        qmax = std::max(qmax, std::abs((int)q.q[j]));
        EXPECT_LE(std::fabs(q.q[j] * q.d[g] - x[j]), 0.57f * std::fabs(q.d[g]) + 1e-7f) << j;
      }
      EXPECT_EQ(qmax, g == 512 / group ? 0 : 127) << "group " << g;
    }
    for (int s = 0; s < 1024 / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q.q[s * 16 + j];
      EXPECT_EQ(q.sum16[s], sum);
    }
  }
}

// The int8 activations cost little accuracy: the integer dot stays within 2% of the float one.
class QuantKernelTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantKernelTest, QuantizedDotCloseToFloatDot) {
  const DType t = GetParam();
  const int64_t rows = 64, cols = 1024;
  std::string data;
  for (int r = 0; r < rows; ++r) data += random_row(t, cols, 300 + r);
  Matrix W{t, rows, cols, dtype_bytes(t, cols), reinterpret_cast<const uint8_t*>(data.data())};
  auto X = test::random_floats(cols, 17);
  std::vector<float> Y(rows), F(rows);
  matmul(W, X.data(), 1, Y.data());
  for (int r = 0; r < rows; ++r) F[r] = dot_row(t, W.row(r), X.data(), cols);
  EXPECT_LE(test::normalized_error(Y.data(), F.data(), rows), 0.02);
}

// The decode kernels that read 32-element blocks directly give the sums of the unpacked reference path.
TEST_P(QuantKernelTest, DirectDotEqualsUnpackedDot) {
  const DType t = GetParam();
  ASSERT_TRUE(has_direct_dot(t));
  for (int64_t n : {32, 256, 4096}) {
    const std::string row = random_row(t, n, 40 + (uint32_t)n);
    QuantizedActs x;
    quantize_acts(t, test::random_floats(n, 41).data(), n, x);
    UnpackedRow w;
    unpack_row(t, row.data(), n, w);
    const float want = dot_unpacked(w, x), got = dot_direct(t, row.data(), x, n);
    double mag = 0;
    for (int64_t i = 0; i < n; ++i)
      mag += std::fabs((w.scale[i / w.sub] * w.q[i] + (w.has_offset ? w.offset[i / w.sub] : 0.0f)) * x.d[i / x.group] * x.q[i]);
    EXPECT_LE(std::fabs(got - want), 1e-6 * mag + 1e-9) << dtype_name(t) << " n=" << n;
  }
}

// kDirectRows rows at once give each row's own direct dot (matmul's decode path takes them).
TEST_P(QuantKernelTest, DirectRowsEqualOneRowAtATime) {
  const DType t = GetParam();
  for (int64_t n : {32, 256, 4096}) {
    std::vector<std::string> data;
    for (int r = 0; r < kDirectRows; ++r) data.push_back(random_row(t, n, 60 + r + (uint32_t)n));
    const void* rows[kDirectRows];
    for (int r = 0; r < kDirectRows; ++r) rows[r] = data[r].data();
    QuantizedActs x;
    quantize_acts(t, test::random_floats(n, 61).data(), n, x);
    float got[kDirectRows];
    dot_direct_rows(t, rows, &x, 1, n, got, kDirectRows);
    for (int r = 0; r < kDirectRows; ++r) EXPECT_EQ(got[r], dot_direct(t, rows[r], x, n)) << dtype_name(t) << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks32, QuantKernelTest,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Rows packed for decode (Q8_0, Q4_K, Q6_K, Q4_0) give exactly the direct kernel's sums (same integer sums,
// same float steps in the same order), one group alone and two side by side, including extreme quants
// (Q8_0's -128 and 127, which the +128 offset must not wrap; Q4_K's 15 and 63 scales and mins; Q4_0's
// 7 and -8; Q6_K's quants 63 and 0 under scales -128 and 127).
class PackedRowsTest : public ::testing::TestWithParam<DType> {};

TEST_P(PackedRowsTest, EqualDirectRows) {
  const DType t = GetParam();
  if (!has_packed_rows(t))
    GTEST_SKIP() << "no packed " << dtype_name(t) << " kernel in this build (they need AVX2)";
  for (int64_t n : {256, 1280, 4096}) {  // (AVX2 Q8_0's strips of 16 blocks: one partial; two and a partial; 8)
    std::vector<std::string> data;
    for (int r = 0; r < kDirectRows; ++r) data.push_back(random_row(t, n, 80 + r + (uint32_t)n));
    if (t == DType::Q8_0) data[0][2] = (char)-128, data[0][3] = 127;  // block 0's first quants
    if (t == DType::Q4_0) std::memset(&data[0][2], 0xff, 16), std::memset(&data[1][2], 0, 16);  // all 7, all -8
    if (t == DType::Q4_K) {
      for (auto& row : data)  // finite d and dmin (random bytes can be NaN)
        for (int64_t b = 0; b < n / 256; ++b) {
          const uint16_t d = fp32_to_fp16(0.01f * (float)(b + 1)), dmin = fp32_to_fp16(0.003f);
          std::memcpy(&row[b * 144], &d, 2), std::memcpy(&row[b * 144 + 2], &dmin, 2);
        }
      std::memset(&data[0][4], 0xff, 140);  // scales, mins and quants at their maxima
    }
    if (t == DType::Q6_K) {
      for (auto& row : data)  // finite d
        for (int64_t b = 0; b < n / 256; ++b) {
          const uint16_t d = fp32_to_fp16(0.01f * (float)(b + 1));
          std::memcpy(&row[b * 210 + 208], &d, 2);
        }
      std::memset(&data[0][0], 0xff, 192);  // quants at 63
      std::memset(&data[0][192], 0x80, 16);  // scales at -128
      std::memset(&data[1][0], 0, 192);  // quants at 0 (-32)
      std::memset(&data[1][192], 0x7f, 16);  // scales at 127
    }
    const void* rows[kDirectRows];
    for (int r = 0; r < kDirectRows; ++r) rows[r] = data[r].data();
    std::vector<uint8_t> packed(packed_group_bytes(t, n));
    pack_rows(t, rows, n, packed.data());
    QuantizedActs x;
    quantize_acts(t, test::random_floats(n, 81).data(), n, x);
    float got[kDirectRows], want[kDirectRows], two[2 * kDirectRows];
    dot_packed_rows(t, packed.data(), nullptr, x, n, got);  // one group alone
    dot_direct_rows(t, rows, &x, 1, n, want, kDirectRows);
    for (int r = 0; r < kDirectRows; ++r) EXPECT_EQ(got[r], want[r]) << "n=" << n << " row " << r;
    if (const auto avx2_form = dtype_traits(t).packed->dot_tokens_avx2) {  // the AVX2 kernels as well (a VNNI
      // build's own are the 512-bit ones), 15 tokens: passes of 8 (Q8_0), 4, 2 and 1
      constexpr int kTokens = 15;
      std::vector<QuantizedActs> xs(kTokens);
      for (int k = 0; k < kTokens; ++k) quantize_acts(t, test::random_floats(n, 90 + k).data(), n, xs[k]);
      float avx2[kTokens * kDirectRows], each[kTokens * kDirectRows];
      avx2_form(packed.data(), xs.data(), kTokens, n, avx2, kDirectRows);
      for (int k = 0; k < kTokens; ++k) dot_direct_rows(t, rows, &xs[k], 1, n, each + k * kDirectRows, kDirectRows);
      for (int i = 0; i < kTokens * kDirectRows; ++i)
        EXPECT_EQ(avx2[i], each[i]) << "AVX2, n=" << n << " token " << i / kDirectRows << " row " << i % kDirectRows;
    }
    std::vector<uint8_t> other(packed.size());  // the same rows in reverse order: a second group
    std::reverse(std::begin(rows), std::end(rows));
    pack_rows(t, rows, n, other.data());
    dot_packed_rows(t, packed.data(), other.data(), x, n, two);  // both groups side by side
    for (int r = 0; r < kDirectRows; ++r) {
      EXPECT_EQ(two[r], want[r]) << "n=" << n << " row " << r;
      EXPECT_EQ(two[kDirectRows + r], want[kDirectRows - 1 - r]) << "n=" << n << " second group, row " << r;
    }
  }
}

// Every row of a packed group comes back as the file stored it, byte for byte (random bytes: every bit
// of these layouts is a quant, a scale or a sign), with or without this CPU's kernels.
TEST_P(PackedRowsTest, UnpackGivesBackTheFilesRows) {
  const DType t = GetParam();
  for (int64_t n : {256, 4096}) {
    std::vector<std::string> data;
    for (int r = 0; r < kDirectRows; ++r) data.push_back(random_row(t, n, 120 + r + (uint32_t)n));
    const void* rows[kDirectRows];
    for (int r = 0; r < kDirectRows; ++r) rows[r] = data[r].data();
    std::vector<uint8_t> packed(packed_group_bytes(t, n));
    pack_rows(t, rows, n, packed.data());
    for (int r = 0; r < kDirectRows; ++r) {
      std::string back(data[r].size(), '\0');
      unpack_row_from_group(t, packed.data(), r, n, reinterpret_cast<uint8_t*>(back.data()));
      EXPECT_EQ(back, data[r]) << "n=" << n << " row " << r;
    }
  }
}

// A packed matrix's rows in the file's layout (a tied embedding's lookups): whole groups from the packed
// copy (the file's bytes there overwritten, as their pages are dropped), the last rows % 8 from the file.
TEST_P(PackedRowsTest, FileRowReadsThePackedCopy) {
  const DType t = GetParam();
  const int64_t n = 512, rows = 2 * kDirectRows + 3;
  std::vector<std::string> want;
  std::string file;
  for (int64_t r = 0; r < rows; ++r) file += want.emplace_back(random_row(t, n, 200 + (uint32_t)r));
  Matrix m{t, rows, n, want[0].size(), reinterpret_cast<const uint8_t*>(file.data())};
  std::vector<uint8_t> packed(2 * packed_group_bytes(t, n));
  for (int g = 0; g < 2; ++g) {
    const void* group[kDirectRows];
    for (int i = 0; i < kDirectRows; ++i) group[i] = want[g * kDirectRows + i].data();
    pack_rows(t, group, n, &packed[g * packed_group_bytes(t, n)]);
  }
  m.packed = packed.data();
  std::memset(file.data(), 0xff, 2 * kDirectRows * m.row_bytes);
  std::vector<uint8_t> buf;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = static_cast<const char*>(file_row(m, r, buf));
    EXPECT_EQ(std::string(row, m.row_bytes), want[r]) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Packable, PackedRowsTest, ::testing::Values(DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every row of the type table with kernels is listed, and where it takes the int8 path its unpacker
// holds the values its dequantizer gives (a new row is checked here without a line changing).
TEST(DType, EveryRowsUnpackerHoldsWhatItsDequantizerGives) {
  int checked = 0;
  for (uint32_t raw = 0; raw < 64; ++raw) {
    const DTypeTraits* tr = dtype_traits(raw);
    if (!tr || !tr->computable()) continue;
    EXPECT_NE(computable_dtype_list().find(tr->name), std::string::npos) << tr->name;
    EXPECT_EQ(uses_quantized_acts(tr->type), tr->unpack != nullptr) << tr->name;
    if (!tr->unpack) continue;
    const int64_t n = 512;
    std::mt19937 rng(raw);
    std::string row(dtype_bytes(tr->type, n), '\0');  // any bytes: scales too, so some are inf or NaN
    for (auto& c : row) c = (char)(rng() & 0xff);
    std::vector<float> want(n);
    dequantize_row(tr->type, row.data(), want.data(), n);
    UnpackedRow u;
    unpack_row(tr->type, row.data(), n, u);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t s = j / u.sub, b = j / 256;
      const double scaled = u.k_quant ? (double)u.d[b] * u.iscale[s] * u.q[j] : (double)u.scale[s] * u.q[j];
      const double offset = u.k_quant ? -(double)u.dmin[b] * u.imin[s] : (double)u.offset[s];
      if (!std::isfinite(scaled + offset) || !std::isfinite(want[j])) continue;
      ASSERT_LE(std::fabs(want[j] - (scaled + offset)), 1e-5 * (std::fabs(scaled) + std::fabs(offset)) + 1e-30)
          << tr->name << " element " << j;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
}

TEST(DType, UnknownAndUncomputableTypes) {
  EXPECT_EQ(dtype_traits(4), nullptr);  // Q4_2: removed from ggml
  EXPECT_EQ(dtype_traits(999), nullptr);
  EXPECT_FALSE(dtype_computable(DType::Q3_K));
  EXPECT_TRUE(dtype_computable(DType::Q6_K));
  float out[256];
  std::string row(110, '\0');
  EXPECT_THROW(dequantize_row(DType::Q3_K, row.data(), out, 256), Error);
}

// A type without a kernel family is an error from each family's entry points, never another type's
// kernel or size (packed_group_bytes once answered Q8_0's for any type it did not know).
TEST(DType, APathATypeLacksIsAnErrorNeverADefault) {
  const std::string row(176, '\0');
  const void* rows[kDirectRows];
  for (auto& r : rows) r = row.data();
  EXPECT_FALSE(has_packed_rows(DType::Q5_K));
  EXPECT_THROW(packed_group_bytes(DType::Q5_K, 256), Error);
  std::vector<uint8_t> out(4096);
  EXPECT_THROW(pack_rows(DType::Q5_K, rows, 256, out.data()), Error);
  QuantizedActs x;
  quantize_acts(DType::Q3_K, test::random_floats(256, 1).data(), 256, x);
  EXPECT_FALSE(has_direct_dot(DType::Q3_K));
  EXPECT_THROW(dot_direct(DType::Q3_K, row.data(), x, 256), Error);
  EXPECT_FALSE(has_quant_tiles(DType::F16));
  float y[16 * 4];
  EXPECT_THROW(quant_tile(DType::F16, rows, &x, 1, 256, y, 16), Error);
  EXPECT_THROW(dtype_traits(static_cast<DType>(999)), Error);
  // and every type with a packed layout states its block, its bytes and both directions of its copy
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const PackedRowsKernels* k = dtype_traits(t).packed;
    ASSERT_NE(k, nullptr) << dtype_name(t);
    EXPECT_TRUE(k->pack && k->unpack && k->block > 0 && k->block_bytes > 0) << dtype_name(t);
    EXPECT_EQ(packed_group_bytes(t, 512), (size_t)(512 / k->block) * k->block_bytes) << dtype_name(t);
  }
}

}  // namespace
}  // namespace fasa
