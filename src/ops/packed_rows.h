#pragma once
// Weight rows packed for the decode matmul, kDirectRows at a time: one 512- or 256-bit load then holds
// several columns of all 8 rows, so one vpdpbusd (VNNI: unsigned x signed byte dots) or vpmaddubsw
// (AVX2, packed_rows_avx2.cpp; Q8_0 with the sign trick) adds products to every row's sums and no row's sum
// needs a horizontal reduction per block. The copy is
// made once when the model loads (model.cpp); the integer sums and the float steps are dot_direct_rows'
// in its order, so results are bit-identical to it (and to llama.cpp's per-block sums).
//
// Q8_0, per block of 32 columns: the rows' 8 fp16 scales (16 bytes), then for each 4-column chunk the
// rows' 4 quants + 128 as unsigned bytes (32 bytes); each row's 8 lanes hold its chunks' running sums.
// Q4_K, per super-block of 256 columns: the rows' fp16 d (16 bytes) and dmin (16), their 6-bit scales as
// bytes [sub-block][row] (64), their mins as bytes [row][sub-blocks 0-3], then [row][4-7] (64), then 16
// lines of 64 bytes, line m for columns 16m..16m+15: byte 8r + k holds row r's column 16m + k in its low
// nibble and 16m + 8 + k in its high one (1024). Each unpacked line pairs int32 lanes 2r, 2r + 1 with
// row r's 4-column chunks, so the activations it meets are one 8-byte broadcast.
// Q6_K, per super-block: the rows' fp16 d (16 bytes), their int8 scales [sub-block][row] (128), Q4_K's 16
// lines of the quants' low nibbles (1024), then for each pair of lines 2j, 2j + 1 the high 2 bits (64):
// byte 8r + k holds row r's columns 32j + k, + 8, + 16, + 24 in bits 0-1, 2-3, 4-5, 6-7. A line is one
// sub-block of 16 columns, so its sums take one scale per row.
// Q4_0, per block of 32 columns: the rows' fp16 d (16 bytes), then Q4_K's lines for columns 0-15 and
// 16-31 (128); each row's integer sum is whole per block, then one float step (dot_direct_rows' order).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/dtype.h"
#include "ops/matrix.h"
#include "ops/quant_dot.h"

namespace fasa {

// The type's row (ops/dtype_kernels.h) says which: Q8_0, Q4_K, Q6_K and Q4_0 with AVX2.
bool has_packed_rows(DType weight_type);
size_t packed_group_bytes(DType weight_type, int64_t n);  // one group of kDirectRows rows of n columns
int packed_rows_most_tokens(DType weight_type);    // batches up to this many tokens read the packed rows, not the tiles
// rows: kDirectRows rows of n columns; out: packed_group_bytes(weight_type, n). Any of the four types,
// whether or not this CPU has their kernels.
void pack_rows(DType weight_type, const void* const* rows, int64_t n, uint8_t* out);
// Row r of a packed group as the file stored it, byte for byte (pack_rows' inverse): a tied embedding
// looks its rows up here, so the file's pages of a packed matrix are never read again.
// row: n columns' bytes in weight_type's block layout
void unpack_row_from_group(DType weight_type, const uint8_t* group, int r, int64_t n, uint8_t* row);
// Matrix m's row r in the file's layout: from the file, or where m is packed (its file pages dropped),
// unpacked into buf.
const void* file_row(const Matrix& m, int64_t r, std::vector<uint8_t>& buf);
// Two groups (read side by side, two memory streams, where the type's row has dot_pair; else one after
// the other), or one where group_b is null.   out: [16] or [8]
void dot_packed_rows(DType weight_type, const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs& x,
                     int64_t n, float* out);
// One group against n_tokens tokens (small batches), bit-identical to dot_packed_rows per token: each
// load of the group serves several tokens.   x: [n_tokens]; out[t * ldo + r] for r < kDirectRows
void dot_packed_tokens(DType weight_type, const uint8_t* group, const QuantizedActs* x, int n_tokens, int64_t n,
                       float* out, int64_t ldo);

}  // namespace fasa
