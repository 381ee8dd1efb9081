#pragma once
// Integer dot products for quantized weights, as llama.cpp computes them: the activation row is first
// rounded to int8 with one scale per group (32 elements = Q8_0, fp16 scale, for the 32-element weight
// formats; 256 = Q8_K, float scale, for the K-quants), each weight row is unpacked to int8 with a float
// scale and offset per sub-block, and every sub-block contributes
//   d_x * (scale * sum(q_w * q_x) + offset * sum(q_x)).
// The exact integer sums and the same activation rounding keep greedy decoding of a quantized model on
// the path llama.cpp takes (rounded activations with float sums part from it more often at near ties).
#include <cstdint>
#include <vector>

#include "ops/dtype.h"

namespace fasa {

// The types with an unpacker in their traits (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K); float
// types keep float activations.
bool uses_quantized_acts(DType weight_type);

struct QuantizedActs {
  int group = 32;              // elements per scale: 32 or 256
  std::vector<int8_t> q;       // [n]
  std::vector<float> d;        // [n / group]
  std::vector<int32_t> sum16;  // [n / 16] sum of q over each 16 elements (for the offsets)
  std::vector<int16_t> sum32;  // [n / 32] the same over each 32 (packed Q4_K rows' mins)
  std::vector<int32_t> minus128_sum4;  // [n / 4] -128 * the sum of q over each 4 elements (packed Q8_0 rows)
};

// x: [n], n a multiple of the weight type's block.
void quantize_acts(DType weight_type, const float* x, int64_t n, QuantizedActs& out);

// The 32-element formats: w[j] = scale[b] * q[j] + offset[b] for j in block b.
// The K-quants, as llama.cpp sums them: integer scales and mins per sub-block (16 or 32 elements), one
// float d and dmin per super-block of 256; each super-block contributes
//   d_x*d * sum_s(iscale[s] * sum(q_w * q_x)) - d_x*dmin * sum_s(imin[s] * sum(q_x)),
// integer up to those two products.
struct UnpackedRow {
  int sub = 32;                // elements per scale
  bool has_offset = false;
  bool k_quant = false;
  std::vector<int8_t> q;       // [n]
  std::vector<float> scale;    // [n / sub] (32-element formats)
  std::vector<float> offset;   // [n / sub] (32-element formats)
  std::vector<int16_t> iscale; // [n / sub] (K-quants)
  std::vector<int16_t> imin;   // [n / sub] (K-quants with mins)
  std::vector<float> d;        // [n / 256] (K-quants)
  std::vector<float> dmin;     // [n / 256] (K-quants with mins)
};

// The row of `weight_type` (its traits' unpack).
void unpack_row(DType weight_type, const void* row, int64_t n, UnpackedRow& out);
// Each type's unpacker, as dtype.cpp's table names them.
void unpack_q8_0(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q4_0(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q4_1(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q5_0(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q5_1(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q4_k(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q5_k(const uint8_t* p, int64_t n, UnpackedRow& out);
void unpack_q6_k(const uint8_t* p, int64_t n, UnpackedRow& out);
float dot_unpacked(const UnpackedRow& w, const QuantizedActs& x);

// Rows straight from their blocks (no unpacking): Q8_0 and Q4_0 (AVX2 where the build has it, else
// scalar), and Q4_K, Q5_K, Q6_K where the build has AVX2. The matmul's kernels. Same integer sums as
// unpack_row + dot_unpacked (the K-quants: bit-identical results).
bool has_direct_dot(DType weight_type);
float dot_direct(DType weight_type, const void* row, const QuantizedActs& x, int64_t n);

// out[t * ldo + r] = dot_direct(weight_type, rows[r], x[t], n) for kDirectRows rows and n_tokens tokens
// (the matmul's path for decode and small batches): each activation block is loaded once for all the
// rows, whose sums run as independent chains; each row comes from memory once for all the tokens, and
// a K-quant row is unpacked once for up to 8 tokens (4 with AVX2).   x: [n_tokens]
constexpr int kDirectRows = 8;
void dot_direct_rows(DType weight_type, const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n,
                     float* out, int64_t ldo);

// Two int16 in one int32 (lo in the low half), as vpmaddwd and vpdpwssd read a lane.
inline int32_t int16_pair(int32_t lo, int32_t hi) {
  return (int32_t)((uint32_t)(uint16_t)lo | ((uint32_t)(uint16_t)hi << 16));
}

// The kernels' passes over several tokens: n_tokens in passes of kMost (8, 4 or 2), then 4, 2 and 1;
// pass.template operator()<NT>(t) takes tokens t..t + NT - 1.
template <int kMost, class Pass>
void in_token_passes(int n_tokens, Pass pass) {
  static_assert(kMost == 8 || kMost == 4 || kMost == 2);
  int t = 0;
  if constexpr (kMost == 8)
    for (; t + 8 <= n_tokens; t += 8) pass.template operator()<8>(t);
  if constexpr (kMost >= 4)
    for (; t + 4 <= n_tokens; t += 4) pass.template operator()<4>(t);
  for (; t + 2 <= n_tokens; t += 2) pass.template operator()<2>(t);
  for (; t < n_tokens; ++t) pass.template operator()<1>(t);
}

}  // namespace fasa
