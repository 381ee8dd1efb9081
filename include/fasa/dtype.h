#pragma once
// Element types of tensors, numbered as ggml numbers them (so GGUF values map directly): the weights'
// types, and the KV cache's (CacheOptions: F16, F32 or Q8_0). Their kernels are src/ops/dtype.h's.
#include <cstdint>

namespace fasa {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

// The KV cache's element types, as its settings spell them (--kv-type, -ctk, -ctv): the one list of them.
struct KvTypeName {
  DType type;
  const char* name;
};
inline constexpr KvTypeName kKvTypes[] = {{DType::F16, "f16"}, {DType::F32, "f32"}, {DType::Q8_0, "q8_0"}};

}  // namespace fasa
