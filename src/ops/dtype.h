#pragma once
// Element types of weight tensors (numbered as ggml numbers them, so GGUF values map directly),
// the scalar fp16/bf16 conversions, and the per-row dequantize / dot kernels every matmul uses.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fasa/dtype.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace fasa {


struct UnpackedRow;
struct DirectDotKernels;
struct TileKernels;
struct PackedRowsKernels;

// One row per type (dtype.cpp's table) with the kernels it takes; a null kernel is a path it does not.
struct DTypeTraits {
  DType type;
  const char* name;
  int block;          // elements per block
  int block_bytes;    // bytes per block
  // The Vulkan shaders' name for its rows (matvec_<it>, get_row_<it>: CMake's FASA_GPU_WEIGHT_TYPES,
  // src/gpu/shaders/weights.glsl); null: its matrices do not run on the device.
  const char* gpu_shader = nullptr;
  // A row of n elements (n a multiple of block) as floats; null: no kernels here (not computable).
  void (*dequantize)(const uint8_t* row, float* out, int64_t n) = nullptr;
  // The row as int8 with its scales, for dots with int8 activations as llama.cpp does them
  // (quant_dot.h); null: the type is dotted with float activations.
  void (*unpack)(const uint8_t* row, int64_t n, UnpackedRow& out) = nullptr;
  // The fast paths (ops/dtype_kernels.h), each defined in its kernels' file: direct dots, prefill
  // tiles, packed decode rows.
  const DirectDotKernels* direct = nullptr;
  const TileKernels* tiles = nullptr;
  const PackedRowsKernels* packed = nullptr;
  bool computable() const { return dequantize != nullptr; }
};

// The row of a raw ggml type number; null for numbers this build does not know.
const DTypeTraits* dtype_traits(uint32_t raw);
const DTypeTraits& dtype_traits(DType t);  // throws for a type this build does not know
const char* dtype_name(DType t);
bool dtype_computable(DType t);
std::string computable_dtype_list();  // "F32, F16, ...": the rows with kernels
std::string gpu_dtype_list();         // the rows with GPU shaders

// Bytes of `n` elements (n must be a multiple of the block size).
size_t dtype_bytes(DType t, int64_t n);

// Quantized block layouts (ggml's): one fp16 scale, then the quants.
constexpr int kQ8_0Block = 32;  // struct { uint16 d; int8 qs[32]; }   value = qs[j] * d
constexpr int kQ4_0Block = 32;  // struct { uint16 d; uint8 qs[16]; }  low nibbles are elements 0..15,
                                // high nibbles 16..31; value = (nibble - 8) * d

inline float fp32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// IEEE half -> float (exact, handles subnormals, inf and NaN).
inline float fp16_to_fp32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);  // one instruction: the quantized kernels convert a block scale per 32 weights
#else
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = (float)mant * 5.9604644775390625e-8f;  // mant * 2^-24
    return sign ? -v : v;
  }
  return fp32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
#endif
}

// The little-endian half stored at p (block scales), as float.
inline float fp16_at(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// float -> IEEE half, round to nearest even.
uint16_t fp32_to_fp16(float f);

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits((uint32_t)h << 16); }
inline uint16_t fp32_to_bf16(float f) {
  uint32_t u = fp32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// out[0..n) = the n elements of a row of type t starting at `row` (n a multiple of the block).
void dequantize_row(DType t, const void* row, float* out, int64_t n);

// sum_i row[i] * x[i] over n elements of a row of type t.
float dot_row(DType t, const void* row, const float* x, int64_t n);
// out[k * ldo] = dot_row(t, row, x + k * n, n) for n_tokens rows of x, bit for bit: the row is read
// from memory (and converted) once for all of them (the matmul's small batches).   x: [n_tokens, n]
void dot_row_tokens(DType t, const void* row, const float* x, int n_tokens, int64_t n, float* out, int64_t ldo);

// Plain dot product of two float vectors (vectorised).
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace fasa
