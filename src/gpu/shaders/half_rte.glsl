// f to the nearest F16 value, ties to even — the CPU's rounding (fp32_to_fp16) — as a float that
// F16 holds exactly, so that float16_t() of it is exact whatever rounding the driver's own
// conversion uses (GLSL leaves it open: lavapipe's differs, and K rows an ulp apart reorder TIP).
float round_to_half(float f) {
  const uint x = floatBitsToUint(f), sign = (x >> 16) & 0x8000u, m = x & 0x7fffffu;
  const int e = int((x >> 23) & 0xffu) - 127 + 15;  // the F16 exponent
  uint h;
  if (((x >> 23) & 0xffu) == 0xffu) {
    h = sign | 0x7c00u | (m != 0u ? 0x200u : 0u);  // Inf, NaN
  } else if (e >= 31) {
    h = sign | 0x7c00u;  // overflow: Inf
  } else if (e <= 0) {  // an F16 subnormal, or zero
    if (e < -10) return uintBitsToFloat(sign << 16);
    const uint full = m | 0x800000u, shift = uint(14 - e);
    h = full >> shift;
    const uint rest = full & ((1u << shift) - 1u), half_way = 1u << (shift - 1u);
    if (rest > half_way || (rest == half_way && (h & 1u) != 0u)) h += 1u;
    h |= sign;
  } else {
    h = (uint(e) << 10) | (m >> 13);
    const uint rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) h += 1u;  // (a carry into the exponent is right)
    h |= sign;
  }
  return unpackHalf2x16(h).x;
}
