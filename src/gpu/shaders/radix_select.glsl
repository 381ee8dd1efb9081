// The key of the want-th largest of SCORE(i) for i in lo..hi-1 (1 <= want <= hi - lo, or 0), found
// by a radix select over order-keeping 32-bit keys, 8 bits a pass from the top, in one workgroup of
// 64; `ties`: how many scores with exactly that key belong to the top want. Every invocation of the
// workgroup calls it. The includer defines SCORE(i).
shared uint histogram[256];
shared uint chosen_bin, still_needed;

// A float's bits as an unsigned key with the same order.
uint key_of(float f) {
  const uint u = floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

uint radix_threshold(uint lo, uint hi, uint want, out uint ties) {
  const uint tid = gl_LocalInvocationID.x;
  if (tid == 0u) still_needed = want;
  uint prefix = 0u, prefix_mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint b = tid; b < 256u; b += 64u) histogram[b] = 0u;
    barrier();
    for (uint i = lo + tid; i < hi; i += 64u) {
      const uint k = key_of(SCORE(i));
      if ((k & prefix_mask) == prefix) atomicAdd(histogram[(k >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (tid == 0u) {  // the bin holding the still_needed-th largest of the keys matching the prefix
      uint above = 0u, b = 255u;
      for (; b > 0u && above + histogram[b] < still_needed; --b) above += histogram[b];
      chosen_bin = b;
      still_needed -= above;
    }
    barrier();
    prefix |= chosen_bin << uint(shift);
    prefix_mask |= 255u << uint(shift);
  }
  ties = still_needed;
  barrier();  // (before anyone sets still_needed again)
  return prefix;
}
