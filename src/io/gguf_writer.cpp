#include "io/gguf_writer.h"

#include <fstream>

#include "fasa/error.h"

namespace fasa {

std::string gguf_le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string gguf_le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string gguf_string(const std::string& s) { return gguf_le64(s.size()) + s; }

namespace {
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void GgufWriter::kv_raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
  kv_ += gguf_string(key) + gguf_le32(type) + value_bytes;
  ++n_kv_;
}
void GgufWriter::kv_string(const std::string& key, const std::string& v) { kv_raw(key, 8, gguf_string(v)); }
void GgufWriter::kv_u32(const std::string& key, uint32_t v) { kv_raw(key, 4, gguf_le32(v)); }
void GgufWriter::kv_i32(const std::string& key, int32_t v) { kv_raw(key, 5, gguf_le32((uint32_t)v)); }
void GgufWriter::kv_u64(const std::string& key, uint64_t v) { kv_raw(key, 10, gguf_le64(v)); }
void GgufWriter::kv_f32(const std::string& key, float v) {
  kv_raw(key, 6, std::string(reinterpret_cast<const char*>(&v), 4));
}
void GgufWriter::kv_bool(const std::string& key, bool v) { kv_raw(key, 7, std::string(1, v ? 1 : 0)); }
void GgufWriter::kv_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::string b = gguf_le32(8) + gguf_le64(v.size());
  for (auto& s : v) b += gguf_string(s);
  kv_raw(key, 9, b);
}
void GgufWriter::kv_f32_array(const std::string& key, const std::vector<float>& v) {
  kv_raw(key, 9, gguf_le32(6) + gguf_le64(v.size()) + std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}
void GgufWriter::kv_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  kv_raw(key, 9, gguf_le32(5) + gguf_le64(v.size()) + std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}

void GgufWriter::tensor(const std::string& name, std::vector<int64_t> ne, DType type, const std::string& data) {
  tensors_.push_back({name, std::move(ne), type, data, nullptr});
}
void GgufWriter::tensor_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v) {
  tensor(name, std::move(ne), DType::F32, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}
void GgufWriter::tensor_generated(const std::string& name, std::vector<int64_t> ne, DType type, Fill fill) {
  tensors_.push_back({name, std::move(ne), type, "", std::move(fill)});
}

size_t GgufWriter::T::size() const {
  if (!fill) return data.size();
  int64_t n = 1;
  for (auto d : ne) n *= d;
  return dtype_bytes(type, n);
}

std::string GgufWriter::header(uint32_t version, uint32_t alignment) const {
  std::string out = "GGUF" + gguf_le32(version) + gguf_le64(tensors_.size()) + gguf_le64(n_kv_) + kv_;
  uint64_t off = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const T& t = tensors_[i];
    out += gguf_string(t.name) + gguf_le32((uint32_t)t.ne.size());
    for (auto d : t.ne) out += gguf_le64((uint64_t)d);
    out += gguf_le32((uint32_t)t.type) + gguf_le64(offset_override.empty() ? off : offset_override[i]);
    off += align_up(t.size(), alignment);
  }
  out.resize(align_up(out.size(), alignment), '\0');
  return out;
}

std::string GgufWriter::bytes(uint32_t version, uint32_t alignment) const {
  std::string out = header(version, alignment);
  for (const T& t : tensors_) {
    std::string d = t.data;
    if (t.fill) {
      d.resize(t.size());
      t.fill(reinterpret_cast<uint8_t*>(d.data()), d.size());
    }
    d.resize(align_up(d.size(), alignment), '\0');
    out += d;
  }
  return out;
}

void GgufWriter::write_file(const std::string& path, uint32_t alignment) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot create file");
  const std::string h = header(3, alignment);
  out.write(h.data(), (std::streamsize)h.size());
  std::vector<uint8_t> buf;
  for (const T& t : tensors_) {
    buf.assign(align_up(t.size(), alignment), 0);
    if (t.fill) t.fill(buf.data(), t.size());
    else std::copy(t.data.begin(), t.data.end(), buf.begin());
    out.write(reinterpret_cast<const char*>(buf.data()), (std::streamsize)buf.size());
    if (!out) fail(path, "write failed (disk full?)");
  }
  out.close();
  if (!out) fail(path, "write failed (disk full?)");
}

}  // namespace fasa
