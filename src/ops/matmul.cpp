#include "ops/matmul.h"

#include <algorithm>
#include <vector>

#include "ops/float_vec.h"
#include "ops/kquant_tiles.h"
#include "ops/quant_dot.h"

namespace fasa {

namespace {

float hsum(const VecF& v) {
  float s = 0;
  for (int i = 0; i < kVecF; ++i) s += v[i];
  return s;
}

// A tile's accumulators fill the registers: 6 x 4 of 32 with AVX-512, 4 x 4 of 16 otherwise.
constexpr int kTileRows = kVecF == 16 ? 6 : 4, kTileTokens = 4;

// Y[t, r] for kTileRows weight rows x kTileTokens tokens at once: each loaded vector is used several times.
//   w: [kTileRows, cols] dequantized rows; x: token rows with stride cols; y: token rows with stride ld.
void multiply_tile(const float* w, const float* x, int64_t cols, float* y, int64_t ld) {
  VecF acc[kTileRows][kTileTokens] = {};
  int64_t c = 0;
  for (; c + kVecF <= cols; c += kVecF) {
    VecF xj[kTileTokens];
    for (int j = 0; j < kTileTokens; ++j) xj[j] = load_vec(x + j * cols + c);
    for (int i = 0; i < kTileRows; ++i) {
      const VecF wi = load_vec(w + i * cols + c);
      for (int j = 0; j < kTileTokens; ++j) acc[i][j] += wi * xj[j];
    }
  }
  for (int i = 0; i < kTileRows; ++i)
    for (int j = 0; j < kTileTokens; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t k = c; k < cols; ++k) s += w[i * cols + k] * x[j * cols + k];
      y[j * ld + i] = s;
    }
}

// W's whole groups of kDirectRows rows from its packed copy: group g with group g + half, so each
// thread reads two places of the matrix side by side (one stream alone keeps too few reads in flight).
void matmul_packed(const Matrix& W, const std::vector<QuantizedActs>& xq, int n_tokens, float* Y) {
  const int64_t groups = W.rows / kDirectRows, half = (groups + 1) / 2;
  const size_t gb = packed_group_bytes(W.cols);
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < half; ++g) {
    const bool pair = g + half < groups;
    float y[2 * kDirectRows];  // group g's rows, then group g + half's
    for (int t = 0; t < n_tokens; ++t) {
      float* yt = Y + (int64_t)t * W.rows;
      dot_packed_rows(W.packed + g * gb, pair ? W.packed + (g + half) * gb : nullptr, xq[t], W.cols, y);
      std::copy_n(y, kDirectRows, yt + g * kDirectRows);
      if (pair) std::copy_n(y + kDirectRows, kDirectRows, yt + (g + half) * kDirectRows);
    }
  }
}

// Quantized weights: activations rounded to int8 once per token, each row unpacked once per call.
void matmul_quantized(const Matrix& W, const float* X, int n_tokens, float* Y) {
  const int64_t rows = W.rows, cols = W.cols;
  std::vector<QuantizedActs> xq(n_tokens);
#pragma omp parallel for schedule(static) if (n_tokens > 1)
  for (int t = 0; t < n_tokens; ++t) quantize_acts(W.type, X + (int64_t)t * cols, cols, xq[t]);
  if (n_tokens > 1 && has_kquant_tiles(W.type)) {
    const int64_t whole = rows / kTileGroupRows * kTileGroupRows;
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < whole; r0 += kTileGroupRows) {
      const void* group[kTileGroupRows];
      for (int i = 0; i < kTileGroupRows; ++i) group[i] = W.row(r0 + i);
      kquant_tile(W.type, group, xq.data(), n_tokens, cols, Y + r0, rows);
    }
    for (int64_t r = whole; r < rows; ++r)
      for (int t = 0; t < n_tokens; ++t) Y[(int64_t)t * rows + r] = dot_direct(W.type, W.row(r), xq[t], cols);
    return;
  }
  if (has_direct_dot(W.type)) {
    const int64_t whole = rows / kDirectRows * kDirectRows;  // rows in whole groups of kDirectRows
    if (W.packed) {
      matmul_packed(W, xq, n_tokens, Y);
    } else {
#pragma omp parallel for schedule(static)
      for (int64_t r0 = 0; r0 < whole; r0 += kDirectRows) {
        const void* group[kDirectRows];
        for (int i = 0; i < kDirectRows; ++i) group[i] = W.row(r0 + i);
        float y[kDirectRows];
        for (int t = 0; t < n_tokens; ++t) {
          dot_direct_rows(W.type, group, xq[t], cols, y);
          std::copy_n(y, kDirectRows, Y + (int64_t)t * rows + r0);
        }
      }
    }
    for (int64_t r = whole; r < rows; ++r)
      for (int t = 0; t < n_tokens; ++t) Y[(int64_t)t * rows + r] = dot_direct(W.type, W.row(r), xq[t], cols);
    return;
  }
#pragma omp parallel
  {
    UnpackedRow w;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      unpack_row(W.type, W.row(r), cols, w);
      for (int t = 0; t < n_tokens; ++t) Y[(int64_t)t * rows + r] = dot_unpacked(w, xq[t]);
    }
  }
}

}  // namespace

void matmul(const Matrix& W, const float* X, int n_tokens, float* Y) {
  const int64_t rows = W.rows, cols = W.cols;
  if (uses_quantized_acts(W.type)) return matmul_quantized(W, X, n_tokens, Y);
  if (n_tokens == 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) Y[r] = dot_row(W.type, W.row(r), X, cols);
    return;
  }
  // Several tokens: each thread dequantizes a tile of rows once and multiplies it with every token.
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
#pragma omp parallel
  {
    std::vector<float> w((size_t)kTileRows * cols);  // [kTileRows, cols] this thread's dequantized rows
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t r0 = tile * kTileRows, nr = std::min<int64_t>(kTileRows, rows - r0);
      for (int64_t i = 0; i < nr; ++i) dequantize_row(W.type, W.row(r0 + i), &w[i * cols], cols);
      int t = 0;
      if (nr == kTileRows)
        for (; t + kTileTokens <= n_tokens; t += kTileTokens)
          multiply_tile(w.data(), X + (int64_t)t * cols, cols, Y + (int64_t)t * rows + r0, rows);
      for (; t < n_tokens; ++t)
        for (int64_t i = 0; i < nr; ++i) Y[(int64_t)t * rows + r0 + i] = dot_f32(&w[i * cols], X + (int64_t)t * cols, cols);
    }
  }
}

void matmul_reference(const Matrix& W, const float* X, int n_tokens, float* Y) {
  std::vector<float> row(W.cols), x(X, X + (size_t)n_tokens * W.cols);  // x: [n_tokens, cols]
  if (uses_quantized_acts(W.type)) {  // the activations as the integer kernels see them
    QuantizedActs q;
    for (int t = 0; t < n_tokens; ++t) {
      quantize_acts(W.type, X + (int64_t)t * W.cols, W.cols, q);
      for (int64_t c = 0; c < W.cols; ++c) x[(size_t)t * W.cols + c] = (float)q.q[c] * q.d[c / q.group];
    }
  }
  for (int64_t r = 0; r < W.rows; ++r) {
    dequantize_row(W.type, W.row(r), row.data(), W.cols);
    for (int t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t c = 0; c < W.cols; ++c) s += (double)row[c] * x[(size_t)t * W.cols + c];
      Y[(int64_t)t * W.rows + r] = (float)s;
    }
  }
}

}  // namespace fasa
