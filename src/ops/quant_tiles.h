#pragma once
// The prefill matmul's kernel for quantized weights (Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): many tokens against
// 16 weight rows. The decode kernels (ops/quant_dot.h) unpack every weight block for every token; with a
// ubatch of tokens that unpacking costs more than the products. Here a group of 16 rows is unpacked
// once per call into a layout where one 64-byte load holds 4 consecutive quants of all 16 rows (as
// unsigned bytes: Q6_K + 32, Q8_0 + 128; ops/quant_tile_layout.h), so one vpdpbusd adds 4 products to
// each of the 16 rows' sums, and that load serves several tokens. AVX2 reads the 64 bytes as two halves
// of 8 rows and uses vpmaddubsw and vpmaddwd (quant_tiles_avx2.cpp).
// The integer sums are exact and the float steps are dot_direct's, in its order (K-quants: per
// super-block; the 4- and 5-bit 32-element formats: per block; Q8_0: per block, in 8 lanes of 4-column chunks summed as hsum_avx sums
// them), so results are bit-identical to dot_direct (llama.cpp's per-block sums).
#include <cstdint>

#include "ops/dtype.h"
#include "ops/quant_dot.h"

namespace fasa {

constexpr int kTileGroupRows = 16;

// True for the K-quants and the 4- and 5-bit 32-element formats where the build has AVX2, and Q8_0
// where it has AVX512-VNNI.
bool has_quant_tiles(DType weight_type);

// y[t * ldy + r] = rows[r] . x[t] for r < kTileGroupRows, t < n_tokens.
//   rows: kTileGroupRows weight rows of n columns; x: n_tokens activation rows quantized for weight_type.
void quant_tile(DType weight_type, const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n,
                 float* y, int64_t ldy);

// The same for 16 rows held as two groups of 8 packed for decode (ops/packed_rows.h), so a matrix whose
// file pages were dropped after packing (model.cpp) serves batches from its one copy: Q8_0 where the
// build has AVX512-VNNI (the other packed types' batches read the packed rows: has_packed_tile false).
//   group_a, group_b: packed_group_bytes(weight_type, n) each, rows 0-7 and 8-15
bool has_packed_tile(DType weight_type);
void quant_tile_packed(DType weight_type, const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs* x,
                       int n_tokens, int64_t n, float* y, int64_t ldy);

}  // namespace fasa
