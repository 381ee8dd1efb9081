#pragma once
#include <cstdint>

#include "ops/matrix.h"

namespace fasa {

// Y[t, r] = sum_c W[r, c] * X[t, c]  for t < n_tokens.
// W: [rows, cols] of any computable type; X: [n_tokens, cols]; Y: [n_tokens, rows].
// Threads split the rows; with several tokens each thread dequantizes a row once and reuses it.
// Quantized weights use llama.cpp's int8 activations and integer dots (ops/quant_dot.h).
void matmul(const Matrix& W, const float* X, int n_tokens, float* Y);

// Plain scalar reference (double accumulation) for tests: dequantized weights times the activations
// rounded to int8 as matmul rounds them for quantized weights.
void matmul_reference(const Matrix& W, const float* X, int n_tokens, float* Y);

}  // namespace fasa
