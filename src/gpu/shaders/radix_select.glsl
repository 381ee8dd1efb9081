// The key of the want-th largest of SCORE(i) for i in lo..hi-1 (1 <= want <= hi - lo, or 0), found
// by a radix select over order-keeping 32-bit keys, 8 bits a pass from the top, in one workgroup of
// 64; `ties`: how many scores with exactly that key belong to the top want. Every invocation of the
// workgroup calls it. gather_top then hands the includer each of those rows in ascending order with
// its slot, 0.. (the lowest rows of the ties first): EMIT(i, slot). The includer defines SCORE(i) and
// EMIT(i, slot).
shared uint histogram[256];
shared uint chosen_bin, still_needed;
shared uint first_slot[64], ties_of[64];  // gather_top's: per thread's run of rows

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

// Each thread takes a run of consecutive rows of lo..hi-1: it counts its rows above the threshold
// key and equal to it, one thread turns the counts into each run's first slot (the ties going to
// the lowest runs), and each run emits its rows in order.
void gather_top(uint lo, uint hi, uint threshold, uint ties) {
  const uint tid = gl_LocalInvocationID.x, per = (hi - lo + 63u) / 64u;
  const uint a = min(hi, lo + tid * per), b = min(hi, a + per);
  uint above = 0u, equal = 0u;
  for (uint i = a; i < b; ++i) {
    const uint k = key_of(SCORE(i));
    above += k > threshold ? 1u : 0u;
    equal += k == threshold ? 1u : 0u;
  }
  first_slot[tid] = above;
  ties_of[tid] = equal;
  barrier();
  if (tid == 0u) {
    uint slot = 0u, ties_left = ties;
    for (uint t = 0u; t < 64u; ++t) {
      const uint taken_ties = min(ties_of[t], ties_left), taken = first_slot[t] + taken_ties;
      ties_left -= taken_ties;
      ties_of[t] = taken_ties;
      first_slot[t] = slot;
      slot += taken;
    }
  }
  barrier();
  uint slot = first_slot[tid], ties_left = ties_of[tid];
  for (uint i = a; i < b; ++i) {
    const uint k = key_of(SCORE(i));
    const bool tie = k == threshold && ties_left > 0u;
    if (k > threshold || tie) {
      EMIT(i, slot);
      ++slot;
      if (tie) --ties_left;
    }
  }
}
