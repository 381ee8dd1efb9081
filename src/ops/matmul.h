#pragma once
#include <cstdint>

#include "ops/matrix.h"

namespace fasa {

// Batches up to this many tokens take the decode kernels over several tokens: each weight row is read
// once for all of them, nothing is unpacked per call, and each token's result is bit for bit what a
// batch of one gives it (so sequences decoded together equal each decoded alone). Larger batches take
// the prefill tiles (quantized weights: still bit-identical; packed Q4_K rows never) or float panels
// (within rounding).
constexpr int kMatmulSmallBatch = 16;

// Y[t, r] = sum_c W[r, c] * X[t, c]  for t < n_tokens.
// W: [rows, cols] of any computable type; X: [n_tokens, cols]; Y: [n_tokens, rows].
// Threads split the rows. Quantized weights use llama.cpp's int8 activations and integer dots
// (ops/quant_dot.h).
void matmul(const Matrix& W, const float* X, int n_tokens, float* Y);

// Plain scalar reference (double accumulation) for tests: dequantized weights times the activations
// rounded to int8 as matmul rounds them for quantized weights.
void matmul_reference(const Matrix& W, const float* X, int n_tokens, float* Y);

}  // namespace fasa
