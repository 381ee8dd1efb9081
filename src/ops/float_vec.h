#pragma once
// The float vector of the kernels written with GCC's vector extension instead of intrinsics: 16 floats
// where the build has AVX-512, else 8 (split over narrower registers on other ISAs). Only functions
// internal to those kernels take and return it, so -Wpsabi's note that its ABI differs with the ISA
// does not concern us.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace fasa {

#if defined(__AVX512F__)
typedef float VecF __attribute__((vector_size(64)));
#else
typedef float VecF __attribute__((vector_size(32)));
#endif
constexpr int kVecF = sizeof(VecF) / sizeof(float);  // floats per VecF

inline VecF load_vec(const float* p) {
  VecF v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store_vec(float* p, const VecF& v) { __builtin_memcpy(p, &v, sizeof v); }

}  // namespace fasa
