#pragma once
// Hugging Face safetensors reader: an 8-byte header length, a JSON header, then raw tensor bytes.
// Sharded checkpoints are read through model.safetensors.index.json. All input is untrusted.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "ops/dtype.h"

namespace fasa {

struct SafetensorInfo {
  std::string name;
  std::string file;            // the .safetensors file it lives in
  DType type = DType::F32;     // F32, F16 or BF16
  std::vector<int64_t> shape;  // row-major, outermost first (HF order)
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path, bool map = true);  // map: MappedFile's
  const std::string& path() const { return file_->path(); }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }
  const std::vector<SafetensorInfo>& tensors() const { return tensors_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::vector<SafetensorInfo> tensors_;
};

// All tensors of a model directory: model.safetensors, or the shards listed by
// model.safetensors.index.json. Keeps every shard mapped.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir, bool map = true);
  const SafetensorInfo* find(const std::string& name) const;
  const std::map<std::string, SafetensorInfo>& tensors() const { return tensors_; }
  std::vector<std::shared_ptr<const MappedFile>> mappings() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, SafetensorInfo> tensors_;
};

}  // namespace fasa
