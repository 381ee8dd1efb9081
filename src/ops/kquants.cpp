#include "ops/kquants.h"

#include <cstring>

#include "ops/dtype.h"

namespace fasa {

namespace {

// The 5th bit of the 32 elements of a Q5_0/Q5_1 block: bit j of qh is element j's.
uint32_t high_bits(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K block: 6 bits each, packed in 12 bytes.
void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

void dequantize_q4_1(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, p += 20, out += 32) {
    const float d = fp16_at(p), m = fp16_at(p + 2);
    for (int j = 0; j < 16; ++j) {
      out[j] = (float)(p[4 + j] & 0x0F) * d + m;
      out[j + 16] = (float)(p[4 + j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, p += 22, out += 32) {
    const float d = fp16_at(p);
    const uint32_t qh = high_bits(p + 2);
    for (int j = 0; j < 16; ++j) {
      const int lo = (p[6 + j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
      const int hi = (p[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      out[j] = (float)(lo - 16) * d;
      out[j + 16] = (float)(hi - 16) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, p += 24, out += 32) {
    const float d = fp16_at(p), m = fp16_at(p + 2);
    const uint32_t qh = high_bits(p + 4);
    for (int j = 0; j < 16; ++j) {
      const int lo = (p[8 + j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
      const int hi = (p[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      out[j] = (float)lo * d + m;
      out[j + 16] = (float)hi * d + m;
    }
  }
}

namespace {

// Q4_K and Q5_K share the layout but for Q5_K's 32 bytes of 5th bits (qh) before the quants.
void dequantize_k4(const uint8_t* p, float* out, int64_t n, bool fifth_bit) {
  const int block_bytes = fifth_bit ? 176 : 144;
  for (int64_t b = 0; b < n / 256; ++b, p += block_bytes) {
    const float d = fp16_at(p), dmin = fp16_at(p + 2);
    const uint8_t* scales = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* q = p + (fifth_bit ? 48 : 16);
    // Four 64-element groups; byte l holds element l of sub-block 2g (low nibble) and 2g+1 (high).
    for (int g = 0; g < 4; ++g, q += 32, out += 64) {
      int sc0, m0, sc1, m1;
      scale_min_k4(2 * g, scales, sc0, m0);
      scale_min_k4(2 * g + 1, scales, sc1, m1);
      for (int l = 0; l < 32; ++l) {
        const int hi0 = fifth_bit && (qh[l] >> (2 * g)) & 1 ? 16 : 0;
        const int hi1 = fifth_bit && (qh[l] >> (2 * g + 1)) & 1 ? 16 : 0;
        out[l] = d * sc0 * ((q[l] & 0x0F) + hi0) - dmin * m0;
        out[l + 32] = d * sc1 * ((q[l] >> 4) + hi1) - dmin * m1;
      }
    }
  }
}

}  // namespace

void dequantize_q4_k(const uint8_t* p, float* out, int64_t n) { dequantize_k4(p, out, n, false); }
void dequantize_q5_k(const uint8_t* p, float* out, int64_t n) { dequantize_k4(p, out, n, true); }

void dequantize_q6_k(const uint8_t* p, float* out, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, p += 210) {
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
    const float d = fp16_at(p + 208);
    // Two halves of 128; in each, 32 lanes l give elements l, l+32, l+64, l+96.
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, out += 128) {
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * sc[s] * q1;
        out[l + 32] = d * sc[s + 2] * q2;
        out[l + 64] = d * sc[s + 4] * q3;
        out[l + 96] = d * sc[s + 6] * q4;
      }
    }
  }
}

}  // namespace fasa
