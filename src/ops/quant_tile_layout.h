#pragma once
// The tiles' layouts (ops/quant_tiles.h): a group of kTileGroupRows weight rows unpacked once per call
// so one load holds 4 consecutive quants of every row; quant_tiles.cpp packs them, the ISA's file
// (quant_tiles_avx512.cpp, quant_tiles_avx2.cpp) multiplies them with the tokens.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/quant_dot.h"
#include "ops/quant_tiles.h"

namespace fasa {

// 16 K-quant rows, per super-block b of 256 columns:
struct PackedGroup {
  std::vector<uint8_t> q;      // [n/256][64 chunks][16 rows][4] the quants as unsigned bytes (Q6_K: + 32)
  std::vector<int32_t> scale;  // [n/256][subs][16] integer scale per sub-block and row
  std::vector<int32_t> pairs;  // [n/256][subs/2][16] two int16 per row: the mins (Q4_K, Q5_K) or the
                               // scales (Q6_K) of sub-blocks 2k and 2k+1, for the activation-sum term
  std::vector<float> d, dmin;  // [n/256][16]
};

// 16 rows of a 32-element format, per block b of 32 columns:
struct PackedBlocks {
  std::vector<uint8_t> q;  // [n/32][8 chunks][16 rows][4] the quants as unsigned bytes (Q8_0 + 128; the
                           // 4- and 5-bit formats' q, 0-15 or 0-31, before their bias)
  std::vector<float> d;    // [n/32][16] the rows' scales
  std::vector<float> m;    // [n/32][16] the rows' offsets (Q4_1, Q5_1)
};

// Four consecutive activation quants as one int32, to broadcast to every row's lane.
inline int32_t quad_at(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// y[t * ldy + r] = row r . x[t] for the group's rows and n_tokens tokens, bit-identical to dot_direct.
// Q4_K, Q5_K, Q6_K: 512-bit VNNI where the build has it, else AVX2.
template <DType T>
void multiply_k_group(const PackedGroup& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy);
// Q8_0: AVX512-VNNI only.
void multiply_q8_0_group(const PackedBlocks& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                         int64_t ldy);
// Q4_0, Q4_1, Q5_0, Q5_1 (ops/block32_layout.h): AVX2.
template <DType T>
void multiply_block32_group(const PackedBlocks& g, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                            int64_t ldy);

}  // namespace fasa
