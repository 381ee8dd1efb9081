// A weight matrix's row in its stored type, read as floats: WEIGHT_F32, WEIGHT_F16 or WEIGHT_Q8_0
// (blocks of 32: an f16 scale, then 32 int8) picks the binding's element type. Binding 0.
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
#error "define WEIGHT_F32, WEIGHT_F16 or WEIGHT_Q8_0"
#endif
