// The prefill kernel for quantized weights (ops/quant_tiles.h) and the decode kernels over several
// tokens against the one-token decode kernel they must equal bit for bit, and the whole matmul against
// the scalar reference.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/packed_rows.h"
#include "ops/quant_dot.h"
#include "ops/quant_tiles.h"
#include "ops/matmul.h"
#include "test_util.h"

namespace fasa {
namespace {

// A row of random blocks: any quants, scales and mins (every bit pattern), d (and dmin) small halves.
// `largest`: every quant, scale and min byte 0xff instead (the largest 4-, 5- and 6-bit quants).
std::string random_k_row(DType t, int64_t n, std::mt19937& rng, bool largest = false) {
  std::string row(dtype_bytes(t, n), '\0');
  for (auto& c : row) c = largest ? (char)0xff : (char)(rng() & 0xff);
  const size_t block = dtype_bytes(t, 256);
  auto put = [&](size_t at) {
    const uint16_t v = fp32_to_fp16(0.001f * (float)((int)(rng() % 200) - 100));
    std::memcpy(&row[at], &v, 2);
  };
  // 32-element blocks: quants anything (Q8_0: including -128 and 127); d, and m where the format has one
  if (t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1) {
    const size_t bb = dtype_bytes(t, 32);
    for (int64_t b = 0; b < n / 32; ++b) {
      put(b * bb);
      if (t == DType::Q4_1 || t == DType::Q5_1) put(b * bb + 2);
    }
    return row;
  }
  for (int64_t b = 0; b < n / 256; ++b) {
    if (t == DType::Q6_K) {
      put(b * block + 208);
    } else {
      put(b * block);
      put(b * block + 2);
    }
  }
  return row;
}

// A [rows, cols] matrix of random rows of type t, stored in `data`.
Matrix random_matrix(DType t, int64_t rows, int64_t cols, unsigned seed, std::string& data) {
  std::mt19937 rng(seed);
  for (int r = 0; r < rows; ++r) data += random_k_row(t, cols, rng);
  return {t, rows, cols, dtype_bytes(t, cols), reinterpret_cast<const uint8_t*>(data.data())};
}

class QuantTileTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantTileTest, EqualsTheDecodeKernelExactly) {
  const DType t = GetParam();
  if (!has_quant_tiles(t)) GTEST_SKIP() << "no tiled kernel for this type in this build (K-quants and the 4- and 5-bit formats need AVX2, Q8_0 AVX512-VNNI)";
  std::mt19937 rng(7);
  for (int64_t n : {256, 2048}) {
    std::vector<std::string> data;
    const void* rows[kTileGroupRows];
    for (int r = 0; r < kTileGroupRows; ++r) data.push_back(random_k_row(t, n, rng, r == 0));
    for (int r = 0; r < kTileGroupRows; ++r) rows[r] = data[r].data();
    for (int n_tokens : {1, 4, 7}) {  // tokens: one, a whole pass of 4, and passes with a remainder
      std::vector<QuantizedActs> x(n_tokens);
      for (int k = 0; k < n_tokens; ++k)  // token 0's quants all 127: with row 0's, the largest integer sums
        quantize_acts(t, k == 0 ? std::vector<float>(n, 1.0f).data() : test::random_floats(n, 30 + k, 4.0f).data(), n, x[k]);
      const int64_t ldy = kTileGroupRows + 3;  // a stride wider than the group, as in a matmul
      std::vector<float> y(n_tokens * ldy, -1.0f);
      quant_tile(t, rows, x.data(), n_tokens, n, y.data(), ldy);
      for (int k = 0; k < n_tokens; ++k)
        for (int r = 0; r < kTileGroupRows; ++r)
          ASSERT_EQ(y[k * ldy + r], dot_direct(t, rows[r], x[k], n))
              << dtype_name(t) << " n=" << n << " token " << k << " row " << r;
      for (int k = 0; k < n_tokens; ++k)  // nothing written past the group's 16 columns
        for (int64_t r = kTileGroupRows; r < ldy; ++r) ASSERT_EQ(y[k * ldy + r], -1.0f) << "token " << k;
    }
  }
}

// The matmul takes the decode kernels for small batches, and for larger ones the tiled kernel for whole
// groups and the decode kernel for the rows after them.
TEST_P(QuantTileTest, MatmulMatchesReference) {
  const DType t = GetParam();
  for (const int64_t cols : {512, 1280}) {
    const int64_t rows = 2 * kTileGroupRows + 5;
    std::string data;
    const Matrix W = random_matrix(t, rows, cols, 8, data);
    for (int n : {1, 6, 8, 12, 20}) {
      auto X = test::random_floats((size_t)n * cols, 12);
      std::vector<float> Y(n * rows), R(n * rows);
      matmul(W, X.data(), n, Y.data());
      matmul_reference(W, X.data(), n, R.data());
      EXPECT_LE(test::normalized_error(Y.data(), R.data(), Y.size()), 1e-5) << dtype_name(t) << " cols " << cols << " n=" << n;
    }
  }
}

// A token's result does not depend on the batch it came in (batched decode of several sequences equals
// each one alone): every batch size, through each path (decode kernels over several tokens, packed
// rows, tiles), gives each token exactly what a batch of one gives it from the file's rows. With a
// packed copy, the file's rows of the packed groups are overwritten (NaN scales): the model drops their
// pages once packed, so every batch size must read the packed copy alone.
TEST_P(QuantTileTest, EveryBatchSizeGivesEachTokenItsOwnResult) {
  const DType t = GetParam();
  // 2 and 5 super-blocks a row: the K-quant kernels reduce several super-blocks' sums together, with a
  // remainder at 5
  for (const int64_t cols : {512, 1280}) {
    const int64_t rows = 2 * kTileGroupRows + kDirectRows + 5;  // two tiles, a packed group past them, 5 rows
    std::string data;
    Matrix W = random_matrix(t, rows, cols, 9, data);
    const int max_tokens = 40;
    auto X = test::random_floats((size_t)max_tokens * cols, 13, 4.0f);
    std::vector<float> one(max_tokens * rows);  // each token alone, from the file's rows
    for (int k = 0; k < max_tokens; ++k) matmul(W, &X[(size_t)k * cols], 1, &one[(size_t)k * rows]);
    std::vector<uint8_t> packed;  // the copy for decode of the types that have one, as bind_weights packs it
    if (has_packed_rows(t)) {
      packed.resize(rows / kDirectRows * packed_group_bytes(t, cols));
      for (int64_t g = 0; g < rows / kDirectRows; ++g) {
        const void* group[kDirectRows];
        for (int i = 0; i < kDirectRows; ++i) group[i] = W.row(g * kDirectRows + i);
        pack_rows(t, group, cols, &packed[g * packed_group_bytes(t, cols)]);
      }
    }
    for (bool use_packed : {false, true}) {
      if (use_packed && packed.empty()) continue;
      if (use_packed) {
        W.packed = packed.data();
        std::memset(data.data(), 0xff, (size_t)(rows / kDirectRows * kDirectRows) * W.row_bytes);
      }
      for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 40}) {
        std::vector<float> Y(n * rows);
        matmul(W, X.data(), n, Y.data());
        for (int k = 0; k < n; ++k)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(Y[k * rows + r], one[k * rows + r]) << dtype_name(t) << (use_packed ? " packed" : "") << " cols " << cols
                                                         << " batch " << n << " token " << k << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quants, QuantTileTest, ::testing::Values(DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::Q4_0,
                                                                   DType::Q4_1, DType::Q5_0, DType::Q5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace fasa
