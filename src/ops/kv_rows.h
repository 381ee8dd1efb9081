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

// out[i] += w * row[i].   out: [n]; row: n elements of type t
void kv_add_scaled(float* out, float w, const void* row, DType t, int n);

// row[i] = x[i] rounded to type t (F16: round to nearest even).   x: [n]
void kv_store(const float* x, DType t, int n, void* row);

// out[i] = row[i] as float.   out: [n]
void kv_load(const void* row, DType t, int n, float* out);

// "f32" / "f16" -> the type; anything else is a clear error.
DType kv_type_from_name(const std::string& name);

}  // namespace fasa
