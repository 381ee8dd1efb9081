// A weight matrix's row in its stored type, read as floats: WEIGHT_F32, WEIGHT_F16, WEIGHT_Q8_0
// (blocks of 32: an f16 scale, then 32 int8), WEIGHT_Q4_0 / WEIGHT_Q5_0 (blocks of 32: an f16 scale,
// [32 fifth bits,] 16 bytes of nibbles) or WEIGHT_Q4_K / WEIGHT_Q6_K (super-blocks of 256), as
// llama.cpp lays them out (src/ops/dtype.cpp and kquants.cpp read them the same way), picks the
// binding's element type. Binding 0.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#if defined(WEIGHT_F32)
layout(std430, binding = 0) readonly buffer Weights { float w[]; };
float weight(uint row, uint cols, uint i) { return w[row * cols + i]; }
#elif defined(WEIGHT_F16)
layout(std430, binding = 0) readonly buffer Weights { float16_t w[]; };
float weight(uint row, uint cols, uint i) { return float(w[row * cols + i]); }
#elif defined(WEIGHT_Q8_0)
layout(std430, binding = 0) readonly buffer Weights { uint8_t w[]; };
// Block b of a row starts at byte (row * cols / 32 + b) * 34.
float block_scale(uint block) {
  const uint at = block * 34u;
  return unpackHalf2x16(uint(w[at]) | (uint(w[at + 1u]) << 8)).x;
}
float block_value(uint block, uint j) { return float(int8_t(w[block * 34u + 2u + j])); }
float weight(uint row, uint cols, uint i) {
  const uint block = row * (cols / 32u) + i / 32u;
  return block_scale(block) * block_value(block, i % 32u);
}
#else
layout(std430, binding = 0) readonly buffer Weights { uint8_t w[]; };
float half_at(uint at) { return unpackHalf2x16(uint(w[at]) | (uint(w[at + 1u]) << 8)).x; }
#if defined(WEIGHT_Q4_0) || defined(WEIGHT_Q5_0)
// Element e of a block: the low nibble of byte e (e < 16) or the high one of byte e - 16; Q5_0's
// fifth bit is bit e of the 32 after the scale; then (q - 8) d, or (q - 16) d.
float weight(uint row, uint cols, uint i) {
#if defined(WEIGHT_Q4_0)
  const uint bytes = 18u, quants = 2u, offset = 8u, fifth = 0u;
#else
  const uint bytes = 22u, quants = 6u, offset = 16u;
#endif
  const uint at = (row * (cols / 32u) + i / 32u) * bytes, e = i % 32u;
  const uint byte = uint(w[at + quants + e % 16u]);
#if defined(WEIGHT_Q5_0)
  const uint fifth = ((uint(w[at + 2u + e / 8u]) >> (e % 8u)) & 1u) << 4;
#endif
  const uint q = (e < 16u ? byte & 15u : byte >> 4) | fifth;
  return half_at(at) * float(int(q) - int(offset));
}
#elif defined(WEIGHT_Q4_K)
// 144 bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of
// 4-bit quants (byte l of each 32 holds sub-block 2g's element l, low nibble, and 2g+1's, high).
float weight(uint row, uint cols, uint i) {
  const uint at = (row * (cols / 256u) + i / 256u) * 144u, e = i % 256u, g = e / 64u, l = e % 32u;
  const uint sub = e / 32u, s = at + 4u;
  uint sc, m;
  if (sub < 4u) {
    sc = uint(w[s + sub]) & 63u;
    m = uint(w[s + sub + 4u]) & 63u;
  } else {
    sc = (uint(w[s + sub + 4u]) & 15u) | ((uint(w[s + sub - 4u]) >> 6) << 4);
    m = (uint(w[s + sub + 4u]) >> 4) | ((uint(w[s + sub]) >> 6) << 4);
  }
  const uint byte = uint(w[at + 16u + 32u * g + l]);
  const uint q = (e % 64u) < 32u ? byte & 15u : byte >> 4;
  return half_at(at) * float(sc) * float(q) - half_at(at + 2u) * float(m);
}
#elif defined(WEIGHT_Q6_K)
// 210 bytes: 128 of low 4 bits, 64 of high 2 bits, 16 int8 scales (one per 16), d (f16). In each
// half of 128, lane l of quarter k: low bits from byte l (k even) or l + 32 (odd), low nibble for
// k < 2; high bits 2k..2k+1 of byte l.
float weight(uint row, uint cols, uint i) {
  const uint at = (row * (cols / 256u) + i / 256u) * 210u, e = i % 256u, half_ = e / 128u;
  const uint k = (e % 128u) / 32u, l = e % 32u;
  const uint low = uint(w[at + half_ * 64u + l + 32u * (k & 1u)]);
  const uint high = (uint(w[at + 128u + half_ * 32u + l]) >> (2u * k)) & 3u;
  const int q = int((k < 2u ? low & 15u : low >> 4) | (high << 4)) - 32;
  const float scale = float(int8_t(w[at + 192u + half_ * 8u + l / 16u + 2u * k]));
  return half_at(at + 208u) * scale * float(q);
}
#else
#error "define WEIGHT_F32, WEIGHT_F16, WEIGHT_Q8_0, WEIGHT_Q4_0, WEIGHT_Q5_0, WEIGHT_Q4_K or WEIGHT_Q6_K"
#endif
#endif
