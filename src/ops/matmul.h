#pragma once
#include <cstdint>

#include "model/weights.h"

namespace fasa {

// Y[t, r] = sum_c W[r, c] * X[t, c]  for t < n_tokens.
// W: [rows, cols] of any computable type; X: [n_tokens, cols]; Y: [n_tokens, rows].
// Threads split the rows; with several tokens each thread dequantizes a row once and reuses it.
void matmul(const Matrix& W, const float* X, int n_tokens, float* Y);

// Plain scalar reference (double accumulation) for tests.
void matmul_reference(const Matrix& W, const float* X, int n_tokens, float* Y);

}  // namespace fasa
