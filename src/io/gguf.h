#pragma once
// GGUF v2/v3 reader over an mmap. Every count, length and offset is checked against the file size
// before use, so a hostile file yields a fasa::Error naming the file, never a crash or huge allocation.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "ops/dtype.h"

namespace fasa {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// One metadata value. Scalars are widened; arrays keep a view into the map (elements of elem_type,
// `count` of them), with string arrays pre-split into views.
struct GgufValue {
  GgufType type = GgufType::U8;
  int64_t i = 0;       // integer and bool scalars (U64 above INT64_MAX is rejected)
  double f = 0.0;      // float scalars (also set for integer ones)
  std::string_view s;  // STRING
  GgufType elem_type = GgufType::U8;     // ARRAY
  uint64_t count = 0;                     // ARRAY
  const uint8_t* elems = nullptr;         // ARRAY of fixed-size scalars
  std::vector<std::string_view> strings;  // ARRAY of STRING
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (row) dimension
  DType type = DType::F32;
  uint64_t offset = 0;      // relative to the data section
  size_t bytes = 0;
  const uint8_t* data = nullptr;
};

class GgufFile {
 public:
  // Parses and validates; throws fasa::Error. `map`: MappedFile's (false: the file read into memory).
  explicit GgufFile(const std::string& path, bool map = true);

  const std::string& path() const { return file_->path(); }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }  // keeps tensor data alive
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed getters: throw a clear error on a missing key (unless a default is given) or a wrong type.
  std::string get_string(const std::string& key) const;
  std::optional<std::string> get_string_opt(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int32_t> get_int_array(const std::string& key) const;

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

const char* gguf_type_name(GgufType t);

}  // namespace fasa
