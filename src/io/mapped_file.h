#pragma once
// A whole file's bytes, read-only: mapped (model weights used straight from the page cache, no copy),
// or read into anonymous memory (llama.cpp's --no-mmap: nothing refers to the file afterwards, and the
// weights are never dropped as clean file pages under memory pressure).
#include <cstddef>
#include <cstdint>
#include <string>

namespace fasa {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path, bool map = true);  // throws fasa::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool mapped() const { return mapped_; }  // false: read into memory
  bool contains(const void* p) const { return p >= data_ && p < data_ + size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = true;
};

}  // namespace fasa
