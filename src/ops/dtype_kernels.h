#pragma once
// The fast paths a quantized weight type takes, one struct per kernel family. Each type's instance is
// defined in the family's own file (quant_dot.cpp, quant_tiles.cpp, packed_rows.cpp) and the type's
// DTypeTraits row (dtype.cpp) points to it, so adding a type touches its row and its kernels, and no
// caller chooses a kernel by comparing types. A null kernel is one this build's instruction set lacks.
#include <cstddef>
#include <cstdint>

namespace fasa {

struct QuantizedActs;

// out[t * ldo + r] = rows[r] . x[t] for the family's rows r and n_tokens tokens.   x: [n_tokens]
using RowsDotKernel = void (*)(const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                               int64_t ldo);

// quant_dot.cpp: rows dotted straight from their blocks (decode and small batches).
struct DirectDotKernels {
  RowsDotKernel one;   // 1 row
  RowsDotKernel rows;  // kDirectRows rows
};

// quant_tiles.cpp: kTileGroupRows rows unpacked once per call for many tokens (prefill).
struct TileKernels {
  RowsDotKernel tile;
  // The same 16 rows held as two groups packed for decode (packed_rows.h); null: a packed type's batches
  // stay on the packed rows.   group_a, group_b: rows 0-7 and 8-15
  void (*packed_tile)(const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs* x, int n_tokens, int64_t n,
                      float* y, int64_t ldy) = nullptr;
};

// packed_rows.cpp: kDirectRows rows interleaved once at load for decode.
struct PackedRowsKernels {
  int block;           // columns per packed block
  size_t block_bytes;  // bytes of one packed block of kDirectRows rows
  void (*pack)(const void* const* rows, int64_t n, uint8_t* out);        // any CPU
  void (*unpack)(const uint8_t* group, int r, int64_t n, uint8_t* row);  // row r in the file's layout, any CPU
  // One group against n_tokens tokens.   out[t * ldo + r]
  void (*dot_tokens)(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                     int64_t ldo) = nullptr;
  // The same with AVX2 alone, where dot_tokens is the AVX-512 form (the tests hold them equal).
  void (*dot_tokens_avx2)(const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n, float* out,
                          int64_t ldo) = nullptr;
  // One token against two groups read side by side (two memory streams); null: one after the other.
  void (*dot_pair)(const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs& x, int64_t n,
                   float* out) = nullptr;
  int most_tokens = 1 << 30;  // batches up to this many tokens read the packed rows rather than the tiles
};

extern const DirectDotKernels kDirectQ8_0, kDirectQ4_0, kDirectQ4_1, kDirectQ5_0, kDirectQ5_1, kDirectQ4_K,
    kDirectQ5_K, kDirectQ6_K;
extern const TileKernels kTilesQ8_0, kTilesQ4_0, kTilesQ4_1, kTilesQ5_0, kTilesQ5_1, kTilesQ4_K, kTilesQ5_K,
    kTilesQ6_K;
extern const PackedRowsKernels kPackedQ8_0, kPackedQ4_0, kPackedQ4_K, kPackedQ6_K;

}  // namespace fasa
