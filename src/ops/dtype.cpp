#include "ops/dtype.h"

#include <algorithm>
#include <array>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "ops/dtype_kernels.h"
#include "ops/hsum_avx.h"
#include "ops/kquants.h"
#include "ops/quant_dot.h"
#include "fasa/error.h"

namespace fasa {

size_t dtype_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = dtype_traits(t);
  return static_cast<size_t>(n / tr.block) * static_cast<size_t>(tr.block_bytes);
}

uint16_t fp32_to_fp16(float f) {
  uint32_t u = fp32_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  // NaN
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // rounds to inf
  if (abs < 0x38800000u) {                                   // subnormal half (or zero)
    // Scale into the subnormal range; float addition rounds to nearest even for us.
    float v = fp32_from_bits(abs) + 0.5f;  // 0.5 = 2^-1: puts the half's ulp (2^-24) at bit 0
    return (uint16_t)(sign | (fp32_to_bits(v) - fp32_to_bits(0.5f)));
  }
  uint32_t mant_odd = (abs >> 13) & 1;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return (uint16_t)(sign | (abs >> 13));
}

namespace {

void dequantize_q8_0(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b, p += 34) {
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = fp16_to_fp32(dh);
    const int8_t* qs = reinterpret_cast<const int8_t*>(p + 2);
    for (int j = 0; j < kQ8_0Block; ++j) out[b * kQ8_0Block + j] = qs[j] * d;
  }
}

void dequantize_q4_0(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, p += 18) {
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = fp16_to_fp32(dh);
    const uint8_t* qs = p + 2;
    float* o = out + b * kQ4_0Block;
    for (int j = 0; j < 16; ++j) {
      o[j] = ((int)(qs[j] & 0x0f) - 8) * d;
      o[j + 16] = ((int)(qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_f16(const uint16_t* p, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = fp16_to_fp32(p[i]);
}

void dequantize_f32(const uint8_t* p, float* out, int64_t n) { std::memcpy(out, p, (size_t)n * 4); }
void dequantize_f16_row(const uint8_t* p, float* out, int64_t n) {
  dequantize_f16(reinterpret_cast<const uint16_t*>(p), out, n);
}
void dequantize_bf16(const uint8_t* p, float* out, int64_t n) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(h[i]);
}

// Every type ggml numbers that a GGUF may hold; those with kernels first, in the order lists show them.
// A new type: its row, with its dequantizer (kquants.h), for int8 dots its unpacker (quant_dot.h), and the
// fast paths it has (dtype_kernels.h) and its GPU shaders.
const DTypeTraits kTypes[] = {
    {DType::F32, "F32", 1, 4, "f32", dequantize_f32},
    {DType::F16, "F16", 1, 2, "f16", dequantize_f16_row},
    {DType::BF16, "BF16", 1, 2, nullptr, dequantize_bf16},
    {DType::Q8_0, "Q8_0", 32, 34, "q8_0", dequantize_q8_0, unpack_q8_0,
     &kDirectQ8_0, &kTilesQ8_0, &kPackedQ8_0},
    {DType::Q4_0, "Q4_0", 32, 18, "q4_0", dequantize_q4_0, unpack_q4_0,
     &kDirectQ4_0, &kTilesQ4_0, &kPackedQ4_0},
    {DType::Q4_1, "Q4_1", 32, 20, nullptr, dequantize_q4_1, unpack_q4_1,
     &kDirectQ4_1, &kTilesQ4_1},
    {DType::Q5_0, "Q5_0", 32, 22, "q5_0", dequantize_q5_0, unpack_q5_0,
     &kDirectQ5_0, &kTilesQ5_0},
    {DType::Q5_1, "Q5_1", 32, 24, nullptr, dequantize_q5_1, unpack_q5_1,
     &kDirectQ5_1, &kTilesQ5_1},
    {DType::Q4_K, "Q4_K", 256, 144, "q4_k", dequantize_q4_k, unpack_q4_k,
     &kDirectQ4_K, &kTilesQ4_K, &kPackedQ4_K},
    {DType::Q5_K, "Q5_K", 256, 176, nullptr, dequantize_q5_k, unpack_q5_k,
     &kDirectQ5_K, &kTilesQ5_K},
    {DType::Q6_K, "Q6_K", 256, 210, "q6_k", dequantize_q6_k, unpack_q6_k,
     &kDirectQ6_K, &kTilesQ6_K, &kPackedQ6_K},
    {DType::Q8_1, "Q8_1", 32, 36},
    {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110},
    {DType::Q8_K, "Q8_K", 256, 292},
    {DType::I8, "I8", 1, 1},
    {DType::I16, "I16", 1, 2},
    {DType::I32, "I32", 1, 4},
    {DType::I64, "I64", 1, 8},
    {DType::F64, "F64", 1, 8},
};

}  // namespace

const DTypeTraits* dtype_traits(uint32_t raw) {
  static const auto by_number = [] {  // (a lookup per row dequantized: no search)
    std::array<const DTypeTraits*, 64> rows{};
    for (const DTypeTraits& t : kTypes) rows.at((uint32_t)t.type) = &t;
    return rows;
  }();
  return raw < by_number.size() ? by_number[raw] : nullptr;
}

const DTypeTraits& dtype_traits(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  if (!tr) throw Error("unknown tensor type " + std::to_string(static_cast<uint32_t>(t)));
  return *tr;
}

const char* dtype_name(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr ? tr->name : "unknown";
}

bool dtype_computable(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr && tr->computable();
}

std::string computable_dtype_list() {
  std::string s;
  for (const DTypeTraits& t : kTypes)
    if (t.computable()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

std::string gpu_dtype_list() {
  std::string s;
  for (const DTypeTraits& t : kTypes)
    if (t.gpu_shader) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

void dequantize_row(DType t, const void* row, float* out, int64_t n) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  if (!tr || !tr->dequantize) throw Error(std::string("no kernel for tensor type ") + dtype_name(t));
  tr->dequantize(static_cast<const uint8_t*>(row), out, n);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

namespace {

// An F16 row times NT float vectors, converted in registers once for all of them (a decode step of a
// small F16 model is mostly these): four chains of 8 per vector cover the FMA latency.
//   x: [NT, n]; out[k * ldo]
template <int NT>
void dot_f16(const uint16_t* p, const float* x, int64_t n, float* out, int64_t ldo) {
  int64_t i = 0;
  float sum[NT] = {};
#if defined(__F16C__) && defined(__FMA__)
  __m256 acc[NT][4];
  for (auto& a : acc)
    for (auto& v : a) v = _mm256_setzero_ps();
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8 * j)));
      for (int k = 0; k < NT; ++k) acc[k][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + k * n + i + 8 * j), acc[k][j]);
    }
  for (int k = 0; k < NT; ++k)
    sum[k] = hsum_avx(_mm256_add_ps(_mm256_add_ps(acc[k][0], acc[k][1]), _mm256_add_ps(acc[k][2], acc[k][3])));
#endif
  for (int k = 0; k < NT; ++k) {
    for (int64_t e = i; e < n; ++e) sum[k] += fp16_to_fp32(p[e]) * x[k * n + e];
    out[k * ldo] = sum[k];
  }
}

}  // namespace

void dot_row_tokens(DType t, const void* row, const float* x, int n_tokens, int64_t n, float* out, int64_t ldo) {
  if (t == DType::F32) {
    for (int k = 0; k < n_tokens; ++k) out[k * ldo] = dot_f32(static_cast<const float*>(row), x + k * n, n);
    return;
  }
  if (t == DType::F16) {
    constexpr int kPass = 2;  // tokens per pass: their accumulators and the weights fill the 16 registers
    const auto* p = static_cast<const uint16_t*>(row);
    int k = 0;
    for (; k + kPass <= n_tokens; k += kPass) dot_f16<kPass>(p, x + k * n, n, out + k * ldo, ldo);
    for (; k < n_tokens; ++k) dot_f16<1>(p, x + k * n, n, out + k * ldo, ldo);
    return;
  }
  // Dequantize a chunk into a small stack buffer, then a float dot per token: one path for every type.
  constexpr int64_t kChunk = 256;  // a multiple of every block size
  alignas(64) float buf[kChunk];
  for (int k = 0; k < n_tokens; ++k) out[k * ldo] = 0.0f;
  const DTypeTraits& tr = dtype_traits(t);
  const uint8_t* p = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    dequantize_row(t, p + (size_t)(i / tr.block) * tr.block_bytes, buf, m);
    for (int k = 0; k < n_tokens; ++k) out[k * ldo] += dot_f32(buf, x + k * n + i, m);
  }
}

float dot_row(DType t, const void* row, const float* x, int64_t n) {
  float out;
  dot_row_tokens(t, row, x, 1, n, &out, 1);
  return out;
}

}  // namespace fasa
