#pragma once
// Writes GGUF v3 files: metadata, tensor table, aligned tensor data. Used by `fasa make-model` (tensor
// data generated on the fly and streamed to disk, so multi-GB files need no RAM) and by the tests
// (small files built in memory, including deliberately malformed ones).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/dtype.h"

namespace fasa {

// Little-endian field encodings of the format.
std::string gguf_le32(uint32_t v);
std::string gguf_le64(uint64_t v);
std::string gguf_string(const std::string& s);  // u64 length + bytes

class GgufWriter {
 public:
  void kv_string(const std::string& key, const std::string& v);
  void kv_u32(const std::string& key, uint32_t v);
  void kv_i32(const std::string& key, int32_t v);
  void kv_f32(const std::string& key, float v);
  void kv_bool(const std::string& key, bool v);
  void kv_u64(const std::string& key, uint64_t v);
  void kv_string_array(const std::string& key, const std::vector<std::string>& v);
  void kv_f32_array(const std::string& key, const std::vector<float>& v);
  void kv_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Appends a raw metadata entry (key, type, value bytes) for malformed-input tests.
  void kv_raw(const std::string& key, uint32_t type, const std::string& value_bytes);

  // A tensor with its bytes; ne in ggml order (ne[0] = row length).
  void tensor(const std::string& name, std::vector<int64_t> ne, DType type, const std::string& data);
  void tensor_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v);
  // A tensor whose bytes `fill(out, n_bytes)` writes when the file is written.
  using Fill = std::function<void(uint8_t* out, size_t n_bytes)>;
  void tensor_generated(const std::string& name, std::vector<int64_t> ne, DType type, Fill fill);

  std::string bytes(uint32_t version = 3, uint32_t alignment = 32) const;  // whole file in memory
  // Streams the file to `path`; throws fasa::Error naming it when writing fails.
  void write_file(const std::string& path, uint32_t alignment = 32) const;

  // Set to override what is written for the tensor table's offsets.
  std::vector<uint64_t> offset_override;  // per tensor, when non-empty

 private:
  struct T {
    std::string name;
    std::vector<int64_t> ne;
    DType type;
    std::string data;  // when fill is empty
    Fill fill;
    size_t size() const;
  };
  std::string header(uint32_t version, uint32_t alignment) const;  // up to the aligned data start
  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

}  // namespace fasa
