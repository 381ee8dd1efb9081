#include "ops/quant_tiles.h"

#include <cstring>
#include <string>

#include "fasa/error.h"
#include "ops/block32_layout.h"
#include "ops/dtype_kernels.h"
#include "ops/packed_rows.h"
#include "ops/quant_tile_layout.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define FASA_TILES_Q8_0 1
#else
#define FASA_TILES_Q8_0 0
#endif

namespace fasa {

namespace {

#if defined(__AVX2__)
constexpr int R = kTileGroupRows;

// Row r's quants, in column order, into the tile's 4-column chunks.   quants: [4 * n_chunks]
void put_chunks(const uint8_t* quants, int n_chunks, int r, uint8_t* q) {
  for (int c = 0; c < n_chunks; ++c) std::memcpy(q + (c * R + r) * 4, quants + 4 * c, 4);
}

// 16 K-quant rows, each unpacked (unpack_row) and laid out as PackedGroup.
template <DType T>
void pack_group(const void* const* rows, int64_t n, PackedGroup& g) {
  constexpr bool q6 = T == DType::Q6_K;
  const int subs = q6 ? 16 : 8;
  const int64_t nb = n / 256;
  g.q.resize((size_t)nb * 256 * R);
  g.scale.resize((size_t)nb * subs * R);
  g.pairs.resize((size_t)nb * subs / 2 * R);
  g.d.resize((size_t)nb * R);
  g.dmin.assign((size_t)nb * R, 0.0f);
  thread_local UnpackedRow u;
  for (int r = 0; r < R; ++r) {
    unpack_row(T, rows[r], n, u);
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* uq = &u.q[b * 256];
      uint8_t quants[256];
      for (int j = 0; j < 256; ++j) quants[j] = (uint8_t)(uq[j] + (q6 ? 32 : 0));
      put_chunks(quants, 64, r, &g.q[(size_t)b * 256 * R]);
      for (int s = 0; s < subs; ++s) g.scale[(b * subs + s) * R + r] = u.iscale[b * subs + s];
      const int16_t* pair_src = q6 ? &u.iscale[b * subs] : &u.imin[b * subs];
      for (int k = 0; k < subs / 2; ++k)
        g.pairs[(b * subs / 2 + k) * R + r] = int16_pair(pair_src[2 * k], pair_src[2 * k + 1]);
      g.d[b * R + r] = u.d[b];
      if (!q6) g.dmin[b * R + r] = u.dmin[b];
    }
  }
}

#if FASA_TILES_Q8_0
// 16 Q8_0 rows (blocks of an fp16 scale and 32 signed quants).
void pack_q8_0(const void* const* rows, int64_t n, PackedBlocks& g) {
  const int64_t nb = n / 32;
  g.q.resize((size_t)nb * 32 * R);
  g.d.resize((size_t)nb * R);
  for (int r = 0; r < R; ++r) {
    const uint8_t* p = static_cast<const uint8_t*>(rows[r]);
    for (int64_t b = 0; b < nb; ++b, p += 34) {
      g.d[b * R + r] = fp16_at(p);
      uint8_t quants[32];
      for (int j = 0; j < 32; ++j) quants[j] = (uint8_t)((int8_t)p[2 + j] + 128);
      put_chunks(quants, 8, r, &g.q[(size_t)b * 32 * R]);
    }
  }
}

// The same group from two groups of 8 rows packed for decode (ops/packed_rows.h): their 4-column
// chunks of 8 rows' quants + 128 are the tile's bytes for rows 0-7 and 8-15.
void unpack_decode_groups_q8_0(const uint8_t* group_a, const uint8_t* group_b, int64_t n, PackedBlocks& g) {
  const int64_t nb = n / 32;
  const size_t block_bytes = packed_group_bytes(DType::Q8_0, 32);  // 8 fp16 scales + 8 chunks x 8 rows x 4
  g.q.resize((size_t)nb * 32 * R);
  g.d.resize((size_t)nb * R);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* half[2] = {group_a + b * block_bytes, group_b + b * block_bytes};
    uint8_t* q = &g.q[(size_t)b * 32 * R];
    for (int h = 0; h < 2; ++h) {
      for (int r = 0; r < 8; ++r) g.d[b * R + 8 * h + r] = fp16_at(half[h] + 2 * r);
      for (int c = 0; c < 8; ++c) std::memcpy(q + (c * R + 8 * h) * 4, half[h] + 16 + c * 32, 32);
    }
  }
}

#endif

// 16 rows of a 4- or 5-bit 32-element format: their quants (before the bias), scales and offsets.
template <Block32Layout L>
void pack_block32(const void* const* rows, int64_t n, PackedBlocks& g) {
  const int64_t nb = n / 32;
  g.q.resize((size_t)nb * 32 * R);
  g.d.resize((size_t)nb * R);
  g.m.resize(L.offset ? (size_t)nb * R : 0);
  for (int r = 0; r < R; ++r) {
    const uint8_t* p = static_cast<const uint8_t*>(rows[r]);
    for (int64_t b = 0; b < nb; ++b, p += L.bytes) {
      g.d[b * R + r] = fp16_at(p);
      if constexpr (L.offset) g.m[b * R + r] = fp16_at(p + 2);
      alignas(32) uint8_t quants[32];  // the elements in order (written by vectors: GCC's bytes stalled)
      _mm256_store_si256(reinterpret_cast<__m256i*>(quants), block32_quants<L>(p));
      put_chunks(quants, 8, r, &g.q[(size_t)b * 32 * R]);
    }
  }
}

#endif

#if defined(__AVX2__)
// The group's unpacking and products, both reused call after call (per thread).
PackedBlocks& blocks_buffer() {
  thread_local PackedBlocks blocks;
  return blocks;
}

template <DType T>
void tile_of(const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* y, int64_t ldy) {
  if constexpr (block32_layout(T) != nullptr) {
    pack_block32<*block32_layout(T)>(rows, n, blocks_buffer());
    multiply_block32_group<T>(blocks_buffer(), x, n_tokens, n, y, ldy);
  } else if constexpr (T == DType::Q8_0) {
#if FASA_TILES_Q8_0
    pack_q8_0(rows, n, blocks_buffer());
    multiply_q8_0_group(blocks_buffer(), x, n_tokens, n, y, ldy);
#endif
  } else {
    thread_local PackedGroup g;
    pack_group<T>(rows, n, g);
    multiply_k_group<T>(g, x, n_tokens, n, y, ldy);
  }
}

#if FASA_TILES_Q8_0
void packed_tile_q8_0(const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs* x, int n_tokens, int64_t n,
                      float* y, int64_t ldy) {
  unpack_decode_groups_q8_0(group_a, group_b, n, blocks_buffer());
  multiply_q8_0_group(blocks_buffer(), x, n_tokens, n, y, ldy);
}
#endif
#endif

const TileKernels& tiles_of(DType t) {
  const TileKernels* k = dtype_traits(t).tiles;
  if (!k || !k->tile) throw Error(std::string("no tiled kernel for tensor type ") + dtype_name(t));
  return *k;
}

}  // namespace

#if defined(__AVX2__)
constinit const TileKernels kTilesQ4_0{&tile_of<DType::Q4_0>}, kTilesQ4_1{&tile_of<DType::Q4_1>},
    kTilesQ5_0{&tile_of<DType::Q5_0>}, kTilesQ5_1{&tile_of<DType::Q5_1>}, kTilesQ4_K{&tile_of<DType::Q4_K>},
    kTilesQ5_K{&tile_of<DType::Q5_K>}, kTilesQ6_K{&tile_of<DType::Q6_K>};
#else
constinit const TileKernels kTilesQ4_0{}, kTilesQ4_1{}, kTilesQ5_0{}, kTilesQ5_1{}, kTilesQ4_K{}, kTilesQ5_K{}, kTilesQ6_K{};
#endif
#if FASA_TILES_Q8_0
constinit const TileKernels kTilesQ8_0{&tile_of<DType::Q8_0>, &packed_tile_q8_0};
#else
constinit const TileKernels kTilesQ8_0{};
#endif

bool has_quant_tiles(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr && tr->tiles && tr->tiles->tile;
}

void quant_tile(DType t, const void* const* rows, const QuantizedActs* x, int n_tokens, int64_t n, float* y,
                int64_t ldy) {
  tiles_of(t).tile(rows, x, n_tokens, n, y, ldy);
}

bool has_packed_tile(DType t) { return has_quant_tiles(t) && tiles_of(t).packed_tile; }

void quant_tile_packed(DType t, const uint8_t* group_a, const uint8_t* group_b, const QuantizedActs* x, int n_tokens,
                       int64_t n, float* y, int64_t ldy) {
  const TileKernels& k = tiles_of(t);
  if (!k.packed_tile) throw Error(std::string("no tiled kernel for packed rows of tensor type ") + dtype_name(t));
  k.packed_tile(group_a, group_b, x, n_tokens, n, y, ldy);
}

}  // namespace fasa
