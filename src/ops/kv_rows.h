#pragma once
// Kernels over rows of a KV cache plane, whose elements are F32, F16 or Q8_0. A Q8_0 row is cut into
// blocks of 32 elements, each ggml's block_q8_0 (an fp16 scale d, then 32 int8 quants; value = q * d),
// the row's last block shorter when its width is not a multiple of 32: a head's key dims split into
// K_dom and K_rest at any even width. The F16 and Q8_0 paths convert with F16C/AVX2 where the build
// has them; the scalar loops are their reference.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "fasa/error.h"
#include "fasa/options.h"
#include "ops/dtype.h"

namespace fasa {

// The types a KV cache plane may have (kKvTypes: F16, F32, Q8_0).
inline bool is_kv_type(DType t) {
  for (const KvTypeName& k : kKvTypes)
    if (k.type == t) return true;
  return false;
}

template <DType T>
using KvElement = std::integral_constant<DType, T>;

// Calls f(KvElement<t>{}) for a KV type t (is_kv_type): the one place a KV kernel picks its element
// type, so the kernels are compiled per type and their inner loops hold no branch on it.
template <class F>
inline auto with_kv_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(KvElement<DType::F32>{});
    case DType::F16: return f(KvElement<DType::F16>{});
    case DType::Q8_0: return f(KvElement<DType::Q8_0>{});
    default: throw Error(std::string("no KV kernels for tensor type ") + dtype_name(t));
  }
}

// Bytes of a row of n elements of type t (Q8_0: 2 bytes of scale per block started).
inline size_t kv_row_bytes(DType t, int n) {
  return with_kv_type(t, [n](auto type) {
    if constexpr (type() == DType::Q8_0) return (size_t)n + 2 * (size_t)((n + kQ8_0Block - 1) / kQ8_0Block);
    else return (size_t)n * (type() == DType::F16 ? 2 : 4);
  });
}

// The block of a Q8_0 row that holds element i (its fp16 scale first), and element i's quant.
inline const uint8_t* kv_q8_block(const void* row, int i) {
  return static_cast<const uint8_t*>(row) + (size_t)(i / kQ8_0Block) * (kQ8_0Block + 2);
}
inline const int8_t* kv_q8_quant(const void* row, int i) {
  return reinterpret_cast<const int8_t*>(kv_q8_block(row, i) + 2) + i % kQ8_0Block;
}

// Element i of a row of type t, as float (slow path: baselines, references).
inline float kv_row_element(const void* row, DType t, int i) {
  return with_kv_type(t, [row, i](auto type) {
    if constexpr (type() == DType::F16) return fp16_to_fp32(static_cast<const uint16_t*>(row)[i]);
    else if constexpr (type() == DType::F32) return static_cast<const float*>(row)[i];
    else return (float)*kv_q8_quant(row, i) * fp16_at(kv_q8_block(row, i));
  });
}

// sum_i q[i] * row[i].   q: [n]; row: n elements of type t
float kv_dot(const float* q, const void* row, DType t, int n);

// score[i] = q . rows[i] for n rows that lie anywhere (gathered): eight at a time, each with its own
// FMA chain, their eight sums reduced together (one dot at a time, the reduction dominated).
// q: [d]; rows: n pointers to d elements of type t; score: [n]
void kv_dot_rows(const float* q, const void* const* rows, int n, DType t, int d, float* score);

// out[i] += w * row[i].   out: [n]; row: n elements of type t
void kv_add_scaled(float* out, float w, const void* row, DType t, int n);

// row[i] = x[i] rounded to type t (F16: round to nearest even; Q8_0: d = max |x| / 127 per block,
// quants round(x / d), as ggml quantizes).   x: [n]
void kv_store(const float* x, DType t, int n, void* row);

// out[i] = row[i] as float.   out: [n]
void kv_load(const void* row, DType t, int n, float* out);

// out[r * n + i] = element i of row r of a plane of n_rows rows of n elements.   out: [n_rows, n]
void kv_load_rows(const void* plane, DType t, int n, int64_t n_rows, float* out);

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

// TIP's scores for selection only (FASA's ranking, and its adaptive budget's estimate of attention's
// weights; never the weights attention uses): on a Q8_0 plane of one
// block per row (n_dom 8, 16, 24 or 32) each query is rounded to a Q8_0 row too and the dots are
// integer, score = q_scale * row_scale * sum q8 * k8 (llama.cpp's Q8_0 dot: int8 lanes, no widening
// to float per element); on any other plane, tip_scores.   Shapes as tip_scores.
void tip_rank_scores(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo, int64_t hi,
                     float* score);

// The same scores, one integer dot at a time (reference).
void tip_rank_scores_reference(const float* q, int n_q, const void* plane, DType t, int n_dom, int64_t lo,
                               int64_t hi, float* score);

// out[h * d + k] += sum_i w[h * n_rows + i] * rows[i][k]: n_q weighted sums of the same rows (the value
// rows of one block of attention, shared by the query heads of a GQA group). Each row is converted
// once per group of heads, and the sums stay in registers across the rows.
// w: [n_q, n_rows]; rows: n_rows pointers to d elements of type t; out: [n_q, d]
void kv_weighted_rows(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d, float* out);

// The same sums, one kv_add_scaled per row and head (reference).
void kv_weighted_rows_reference(const float* w, int n_q, const void* const* rows, int n_rows, DType t, int d,
                                float* out);


}  // namespace fasa
