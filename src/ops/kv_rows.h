#pragma once
// Kernels over rows of a KV cache plane, whose elements are F32 or F16 (DType). The F16 paths
// convert with F16C where the build has it; the scalar loops are their reference.
#include <cstdint>
#include <string>

#include "ops/dtype.h"

namespace fasa {

// Bytes of one element of a KV cache of type t (F32: 4, F16: 2).
inline int kv_elem_bytes(DType t) { return t == DType::F16 ? 2 : 4; }

// Element i of a plane of type t, as float (slow path: baselines, references).
inline float kv_element(const void* plane, DType t, int64_t i) {
  return t == DType::F16 ? fp16_to_fp32(static_cast<const uint16_t*>(plane)[i]) : static_cast<const float*>(plane)[i];
}

// sum_i q[i] * row[i].   q: [n]; row: n elements of type t
float kv_dot(const float* q, const void* row, DType t, int n);

// score[i] = q . rows[i] for n rows that lie anywhere (gathered): eight at a time, each with its own
// FMA chain, their eight sums reduced together (one dot at a time, the reduction dominated).
// q: [d]; rows: n pointers to d elements of type t; score: [n]
void kv_dot_rows(const float* q, const void* const* rows, int n, DType t, int d, float* score);

// out[i] += w * row[i].   out: [n]; row: n elements of type t
void kv_add_scaled(float* out, float w, const void* row, DType t, int n);

// row[i] = x[i] rounded to type t (F16: round to nearest even).   x: [n]
void kv_store(const float* x, DType t, int n, void* row);

// out[i] = row[i] as float.   out: [n]
void kv_load(const void* row, DType t, int n, float* out);

// FASA's TIP scores: score[i * (hi - lo) + j - lo] = q_i . row j of a K_dom plane, for rows
// lo <= j < hi and n_q queries (a query scoring a subset of the dims has zeros on the others).
// From kTipTransposedMinQueries queries on, rows are taken 8 at a time and transposed, so each query
// costs one FMA per dim per 8 rows; for fewer, plain dots are cheaper than the transposes.
// q: [n_q, n_dom]; plane: [rows, n_dom] elements of type t; score: [n_q, hi - lo]
constexpr int kTipTransposedMinQueries = 3;
void tip_scores(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                float* score);

// The same scores, one plain dot at a time (reference).
void tip_scores_reference(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                          float* score);

// out[h * d + k] += sum_i w[h * n_rows + i] * rows[i][k]: n_q weighted sums of the same rows (the value
// rows of one block of attention, shared by the query heads of a GQA group). Each row is converted
// once per group of heads, and the sums stay in registers across the rows.
// w: [n_q, n_rows]; rows: n_rows pointers to d elements of type t; out: [n_q, d]
void kv_weighted_rows(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d, float* out);

// The same sums, one kv_add_scaled per row and head (reference).
void kv_weighted_rows_reference(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d,
                                float* out);

// "f32" / "f16" -> the type; anything else is a clear error.
DType kv_type_from_name(const std::string& name);

}  // namespace fasa
