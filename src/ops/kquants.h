#pragma once
// Dequantization of ggml's other block formats (layouts as llama-quantize writes them):
//   Q4_1 {f16 d, m; u8 qs[16]}                      x = q*d + m
//   Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}               x = (q | hbit<<4) - 16) * d
//   Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]}            x = (q | hbit<<4) * d + m
//   Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}   8 sub-blocks of 32 with 6-bit scale and min
//   Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
//   Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
// In the 32-element formats low nibbles are elements 0..15 and high nibbles 16..31.
#include <cstdint>

namespace fasa {

void dequantize_q4_1(const uint8_t* p, float* out, int64_t n);
void dequantize_q5_0(const uint8_t* p, float* out, int64_t n);
void dequantize_q5_1(const uint8_t* p, float* out, int64_t n);
void dequantize_q4_k(const uint8_t* p, float* out, int64_t n);
void dequantize_q5_k(const uint8_t* p, float* out, int64_t n);
void dequantize_q6_k(const uint8_t* p, float* out, int64_t n);

}  // namespace fasa
