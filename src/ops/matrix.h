#pragma once
// A weight matrix as the matmul kernels see it: a view of rows in their stored type.
#include <cstddef>
#include <cstdint>

#include "ops/dtype.h"

namespace fasa {

// Row-major matrix [rows, cols] of any computable type; row r starts at data + r * row_bytes.
struct Matrix {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  // Q8_0, Q4_K, Q6_K and Q4_0 (AVX2): the rows again, packed in groups of 8 for the matmul
  // (ops/packed_rows.h); the last rows % 8 rows are read from data. Null otherwise.
  const uint8_t* packed = nullptr;
  const void* row(int64_t r) const { return data + (size_t)r * row_bytes; }
};

}  // namespace fasa
