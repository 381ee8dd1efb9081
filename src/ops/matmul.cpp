#include "ops/matmul.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "ops/dtype_kernels.h"
#include "ops/float_vec.h"
#include "ops/packed_rows.h"
#include "ops/quant_tiles.h"
#include "ops/quant_dot.h"

namespace fasa {

namespace {

// Iterations per hand-out of the weight loops, about 256 KiB of weights each: threads take chunks
// from a shared counter rather than fixed shares, so a thread that another process holds up delays the
// matmul by a chunk, not its whole share (a busy machine); yet each chunk is a long run of memory, so
// the prefetchers' ramp-up and the first rows' misses come once per run (chunks of 32 rows decoded
// Q4_K_M at 0.8x of fixed shares on a Zen 4 VM); and at most a quarter of each thread's share, so a
// small matrix still gives every thread of a many-core machine work.
int chunk_of(size_t bytes_per_iteration, int64_t iterations) {
  const int64_t by_bytes = (256 << 10) / std::max<size_t>(1, bytes_per_iteration);
  const int64_t by_threads = iterations / (4 * (int64_t)omp_get_max_threads());
  return (int)std::max<int64_t>(1, std::min(by_bytes, by_threads));
}

// Float weights, several tokens: a panel of kPanelRows rows is dequantized once per call and stored
// column-major, so each step over the columns loads kPanelRows weights as two vectors and multiplies
// them by one broadcast activation per token: the sums stay in kPanelTokens x 2 vector registers and
// leave as contiguous output rows (no horizontal sums, which cost as much as the products at the
// few hundred columns of a small model).
constexpr int kPanelRows = 2 * kVecF, kPanelTokens = 6;

// y[j * ld + i] = sum_c panel[c * kPanelRows + i] * x[j * cols + c] for j < NT tokens, i < kPanelRows.
template <int NT>
void multiply_panel(const float* panel, const float* x, int64_t cols, float* y, int64_t ld, int64_t n_rows) {
  VecF acc[NT][2] = {};
  for (int64_t c = 0; c < cols; ++c) {
    const VecF w0 = load_vec(panel + c * kPanelRows), w1 = load_vec(panel + c * kPanelRows + kVecF);
    for (int j = 0; j < NT; ++j) {
      const float xj = x[j * cols + c];
      acc[j][0] += w0 * xj;
      acc[j][1] += w1 * xj;
    }
  }
  for (int j = 0; j < NT; ++j) {
    if (n_rows == kPanelRows) {
      store_vec(y + j * ld, acc[j][0]);
      store_vec(y + j * ld + kVecF, acc[j][1]);
    } else {  // the matrix's last, partial panel
      for (int64_t i = 0; i < n_rows; ++i) y[j * ld + i] = i < kVecF ? acc[j][0][i] : acc[j][1][i - kVecF];
    }
  }
}

// W's whole groups of kDirectRows rows from its packed copy. One token of a type read in pairs (VNNI's Q8_0):
// group g with group g + half, so each thread reads two places of the matrix side by side (one stream
// alone keeps too few reads in flight); Q4_K's kernel prefetches its one stream instead (two side by
// side decoded at 0.9x); several tokens: each group once for all of them.
void matmul_packed(const Matrix& W, const std::vector<QuantizedActs>& xq, int n_tokens, float* Y) {
  const int64_t groups = W.rows / kDirectRows, half = (groups + 1) / 2;
  const size_t gb = packed_group_bytes(W.type, W.cols);
  const PackedRowsKernels& k = *dtype_traits(W.type).packed;  // (W.packed: its row has them) looked up once
  if (n_tokens == 1 && k.dot_pair) {
#pragma omp parallel for schedule(dynamic, chunk_of(2 * gb, half))
    for (int64_t g = 0; g < half; ++g) {
      const bool pair = g + half < groups;
      float y[2 * kDirectRows];  // group g's rows, then group g + half's
      k.dot_pair(W.packed + g * gb, pair ? W.packed + (g + half) * gb : nullptr, xq[0], W.cols, y);
      std::copy_n(y, kDirectRows, Y + g * kDirectRows);
      if (pair) std::copy_n(y + kDirectRows, kDirectRows, Y + (g + half) * kDirectRows);
    }
    return;
  }
#pragma omp parallel for schedule(dynamic, chunk_of(gb, groups))
  for (int64_t g = 0; g < groups; ++g)
    k.dot_tokens(W.packed + g * gb, xq.data(), n_tokens, W.cols, Y + g * kDirectRows, W.rows);
}

// W's whole groups of kDirectRows rows straight from their blocks (the type has direct kernels).
void matmul_direct(const Matrix& W, const std::vector<QuantizedActs>& xq, int n_tokens, float* Y) {
  const int64_t whole = W.rows / kDirectRows * kDirectRows;
  const RowsDotKernel direct_rows = dtype_traits(W.type).direct->rows;  // looked up once, not per group
#pragma omp parallel for schedule(dynamic, chunk_of(kDirectRows * W.row_bytes, whole / kDirectRows))
  for (int64_t r0 = 0; r0 < whole; r0 += kDirectRows) {
    const void* group[kDirectRows];
    for (int i = 0; i < kDirectRows; ++i) group[i] = W.row(r0 + i);
    direct_rows(group, xq.data(), n_tokens, W.cols, Y + r0, W.rows);
  }
}

// Whether a batch takes the tiles: not where the packed rows are faster (each type's row says up to
// how many tokens they are, packed_rows_most_tokens) or the tiles cannot read them.
bool takes_tiles(const Matrix& W, int n_tokens) {
  if (n_tokens <= kMatmulSmallBatch || !has_quant_tiles(W.type)) return false;
  return !W.packed || (n_tokens > packed_rows_most_tokens(W.type) && has_packed_tile(W.type));
}

// Quantized weights: activations rounded to int8 once per token.
void matmul_quantized(const Matrix& W, const float* X, int n_tokens, float* Y) {
  const int64_t rows = W.rows, cols = W.cols;
  // [n_tokens] kept, their buffers reused call after call; the reference is what the threads below share
  // (the name of a thread_local would be each thread's own vector inside a parallel region).
  thread_local std::vector<QuantizedActs> kept;
  std::vector<QuantizedActs>& xq = kept;
  if (xq.size() < (size_t)n_tokens) xq.resize(n_tokens);
#pragma omp parallel for schedule(static) if (n_tokens > 1)
  for (int t = 0; t < n_tokens; ++t) quantize_acts(W.type, X + (int64_t)t * cols, cols, xq[t]);
  auto rest = [&](int64_t first) {  // rows past the last whole group, one at a time
    for (int64_t r = first; r < rows; ++r)
      for (int t = 0; t < n_tokens; ++t) Y[(int64_t)t * rows + r] = dot_direct(W.type, W.row(r), xq[t], cols);
  };
  if (takes_tiles(W, n_tokens)) {  // their unpacking per call repaid by many tokens
    const int64_t whole = rows / kTileGroupRows * kTileGroupRows;
#pragma omp parallel for schedule(dynamic, chunk_of(kTileGroupRows * W.row_bytes, whole / kTileGroupRows))
    for (int64_t r0 = 0; r0 < whole; r0 += kTileGroupRows) {
      if (W.packed) {  // the file's pages of these rows were dropped (model.cpp)
        static_assert(kTileGroupRows == 2 * kDirectRows, "a tile is two packed groups");
        const size_t gb = packed_group_bytes(W.type, cols);
        const uint8_t* a = W.packed + r0 / kDirectRows * gb;
        quant_tile_packed(W.type, a, a + gb, xq.data(), n_tokens, cols, Y + r0, rows);
        continue;
      }
      const void* group[kTileGroupRows];
      for (int i = 0; i < kTileGroupRows; ++i) group[i] = W.row(r0 + i);
      quant_tile(W.type, group, xq.data(), n_tokens, cols, Y + r0, rows);
    }
    if (W.packed && whole + kDirectRows <= rows) {  // a packed group past the last tile: its file pages are gone too
      dot_packed_tokens(W.type, W.packed + whole / kDirectRows * packed_group_bytes(W.type, cols), xq.data(), n_tokens,
                        cols, Y + whole, rows);
      return rest(whole + kDirectRows);
    }
    return rest(whole);
  }
  if (has_direct_dot(W.type)) {
    const int64_t whole = rows / kDirectRows * kDirectRows;  // rows in whole groups of kDirectRows
    if (W.packed) matmul_packed(W, xq, n_tokens, Y);
    else matmul_direct(W, xq, n_tokens, Y);
    return rest(whole);
  }
  // Other types: each row unpacked once per call.
#pragma omp parallel
  {
    UnpackedRow w;
#pragma omp for schedule(dynamic, chunk_of(W.row_bytes, rows))
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
  if (n_tokens <= kMatmulSmallBatch) {  // each row read once for every token; each token's sums as a batch of one's
#pragma omp parallel for schedule(dynamic, chunk_of(W.row_bytes, rows))
    for (int64_t r = 0; r < rows; ++r) dot_row_tokens(W.type, W.row(r), X, n_tokens, cols, Y + r, rows);
    return;
  }
  // Larger batches: each thread dequantizes a panel of rows once and multiplies it with every token.
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
#pragma omp parallel
  {
    // Kept per thread: allocating them per call cost a third of a small model's prefill (page faults).
    thread_local std::vector<float> w;      // [kPanelRows, cols] the panel's rows
    thread_local std::vector<float> panel;  // [cols, kPanelRows] the same, column-major
    w.resize((size_t)kPanelRows * cols);
    panel.resize((size_t)cols * kPanelRows);
#pragma omp for schedule(dynamic, chunk_of(kPanelRows * W.row_bytes, panels))
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t r0 = p * kPanelRows, nr = std::min<int64_t>(kPanelRows, rows - r0);
      for (int64_t i = 0; i < nr; ++i) dequantize_row(W.type, W.row(r0 + i), &w[i * cols], cols);
      std::fill(w.begin() + nr * cols, w.end(), 0.0f);  // the last, partial panel: zero rows after the matrix's
      for (int64_t i = 0; i < kPanelRows; ++i)
        for (int64_t c = 0; c < cols; ++c) panel[c * kPanelRows + i] = w[i * cols + c];
      float* y = Y + r0;
      int t = 0;
      for (; t + kPanelTokens <= n_tokens; t += kPanelTokens)
        multiply_panel<kPanelTokens>(panel.data(), X + (int64_t)t * cols, cols, y + (int64_t)t * rows, rows, nr);
      for (; t < n_tokens; ++t) multiply_panel<1>(panel.data(), X + (int64_t)t * cols, cols, y + (int64_t)t * rows, rows, nr);
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
