#include "ops/matmul.h"

#include <vector>

namespace fasa {

void matmul(const Matrix& W, const float* X, int n_tokens, float* Y) {
  const int64_t rows = W.rows, cols = W.cols;
  if (n_tokens == 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) Y[r] = dot_row(W.type, W.row(r), X, cols);
    return;
  }
#pragma omp parallel
  {
    std::vector<float> row(cols);  // [cols] this thread's dequantized row
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = static_cast<const float*>(W.row(r));
      if (W.type != DType::F32) {
        dequantize_row(W.type, W.row(r), row.data(), cols);
        w = row.data();
      }
      for (int t = 0; t < n_tokens; ++t) Y[(int64_t)t * rows + r] = dot_f32(w, X + (int64_t)t * cols, cols);
    }
  }
}

void matmul_reference(const Matrix& W, const float* X, int n_tokens, float* Y) {
  std::vector<float> row(W.cols);
  for (int64_t r = 0; r < W.rows; ++r) {
    dequantize_row(W.type, W.row(r), row.data(), W.cols);
    for (int t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t c = 0; c < W.cols; ++c) s += (double)row[c] * X[(int64_t)t * W.cols + c];
      Y[(int64_t)t * W.rows + r] = (float)s;
    }
  }
}

}  // namespace fasa
