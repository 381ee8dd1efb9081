#include "io/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fasa/error.h"

namespace fasa {

namespace {

constexpr uint64_t kMaxTensors = 1u << 20;   // far above any real model (Llama-405B: ~1.1K)
constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxStringLen = 1u << 26;  // 64 MiB: chat templates are KBs
constexpr int kMaxDims = 4;                   // GGML_MAX_DIMS

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

// Bounded cursor over the mapped bytes; every read checks the remaining size first.
class Reader {
 public:
  Reader(const MappedFile& f) : f_(f) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return f_.size() - pos_; }

  void need(size_t n, const char* what) const {
    if (n > remaining())
      fail(f_.path(), std::string("truncated: ") + what + " at byte " + std::to_string(pos_) +
                          " needs " + std::to_string(n) + " bytes, file has " +
                          std::to_string(remaining()) + " left");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringLen)
      fail(f_.path(), std::string(what) + ": string length " + std::to_string(len) + " is absurd");
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(f_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  const uint8_t* skip(size_t n, const char* what) {
    need(n, what);
    const uint8_t* p = f_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  const MappedFile& f_;
  size_t pos_ = 0;
};

void read_scalar(Reader& r, GgufType t, GgufValue& v, const std::string& path, const std::string& key) {
  switch (t) {
    case GgufType::U8: v.i = r.read<uint8_t>("value"); break;
    case GgufType::I8: v.i = r.read<int8_t>("value"); break;
    case GgufType::U16: v.i = r.read<uint16_t>("value"); break;
    case GgufType::I16: v.i = r.read<int16_t>("value"); break;
    case GgufType::U32: v.i = r.read<uint32_t>("value"); break;
    case GgufType::I32: v.i = r.read<int32_t>("value"); break;
    case GgufType::I64: v.i = r.read<int64_t>("value"); break;
    case GgufType::U64: {
      uint64_t u = r.read<uint64_t>("value");
      if (u > (uint64_t)std::numeric_limits<int64_t>::max())
        fail(path, "metadata '" + key + "': value " + std::to_string(u) + " is out of range");
      v.i = (int64_t)u;
      break;
    }
    case GgufType::BOOL: {
      uint8_t b = r.read<uint8_t>("value");
      if (b > 1) fail(path, "metadata '" + key + "': bool value " + std::to_string(b) + " is not 0 or 1");
      v.i = b;
      break;
    }
    case GgufType::F32: v.f = r.read<float>("value"); return;
    case GgufType::F64: v.f = r.read<double>("value"); return;
    default: fail(path, "metadata '" + key + "': unknown value type " + std::to_string((uint32_t)t));
  }
  v.f = (double)v.i;
}

GgufType read_type(Reader& r, const std::string& path, const std::string& key) {
  uint32_t t = r.read<uint32_t>("value type");
  if (t > (uint32_t)GgufType::F64)
    fail(path, "metadata '" + key + "': unknown value type " + std::to_string(t));
  return (GgufType)t;
}

GgufValue read_value(Reader& r, GgufType t, const std::string& path, const std::string& key) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::STRING) {
    v.s = r.read_string("string value");
  } else if (t == GgufType::ARRAY) {
    v.elem_type = read_type(r, path, key);
    v.count = r.read<uint64_t>("array length");
    if (v.elem_type == GgufType::STRING) {
      // Each string takes at least its 8-byte length: bounds the count before reserving.
      if (v.count > r.remaining() / 8)
        fail(path, "metadata '" + key + "': array of " + std::to_string(v.count) +
                       " strings does not fit in the file");
      v.strings.reserve(v.count);
      for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(r.read_string("array string"));
    } else if (v.elem_type == GgufType::ARRAY) {
      fail(path, "metadata '" + key + "': nested arrays are not supported");
    } else {
      size_t es = scalar_size(v.elem_type);
      if (v.count > r.remaining() / es)
        fail(path, "metadata '" + key + "': array of " + std::to_string(v.count) +
                       " elements does not fit in the file");
      v.elems = r.skip(v.count * es, "array data");
    }
  } else {
    read_scalar(r, t, v, path, key);
  }
  return v;
}

// The header after the magic: the version (2 or 3) and the counts of metadata keys and tensors.
struct Header {
  uint32_t version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
};

Header read_header(Reader& r, const MappedFile& f, const std::string& path) {
  if (f.size() < 4 || std::memcmp(f.data(), "GGUF", 4) != 0) fail(path, "not a GGUF file (bad magic)");
  r.skip(4, "magic");
  Header h;
  h.version = r.read<uint32_t>("version");
  if (h.version != 2 && h.version != 3)
    fail(path, "unsupported GGUF version " + std::to_string(h.version) + " (supported: 2, 3)");
  h.n_tensors = r.read<uint64_t>("tensor count");
  h.n_kv = r.read<uint64_t>("metadata count");
  if (h.n_tensors > kMaxTensors) fail(path, "tensor count " + std::to_string(h.n_tensors) + " is absurd");
  if (h.n_kv > kMaxKeys) fail(path, "metadata count " + std::to_string(h.n_kv) + " is absurd");
  return h;
}

std::map<std::string, GgufValue> read_metadata(Reader& r, uint64_t n_kv, const std::string& path) {
  std::map<std::string, GgufValue> kv;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(r.read_string("metadata key"));
    GgufType t = read_type(r, path, key);
    GgufValue v = read_value(r, t, path, key);
    if (!kv.emplace(key, std::move(v)).second) fail(path, "duplicate metadata key '" + key + "'");
  }
  return kv;
}

// general.alignment where the file sets one (a power of two up to 1 MiB), else `def`.
size_t read_alignment(const GgufValue* a, size_t def, const std::string& path) {
  if (!a) return def;
  if (a->type != GgufType::U32 && a->type != GgufType::U64 && a->type != GgufType::I32)
    fail(path, "general.alignment has type " + std::string(gguf_type_name(a->type)));
  if (a->i <= 0 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0)
    fail(path, "general.alignment " + std::to_string(a->i) + " is not a power of two");
  return (size_t)a->i;
}

// A tensor's dimensions into ti.ne; returns its element count.
int64_t read_shape(Reader& r, GgufTensorInfo& ti, size_t file_size, const std::string& path) {
  uint32_t n_dims = r.read<uint32_t>("tensor dims");
  if (n_dims == 0 || n_dims > kMaxDims)
    fail(path, "tensor '" + ti.name + "': " + std::to_string(n_dims) + " dimensions (1.." +
                   std::to_string(kMaxDims) + " allowed)");
  int64_t n_elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = r.read<uint64_t>("tensor shape");
    // No type stores fewer than 1/8 byte per element: bounds every shape by the file size.
    const uint64_t max_elems = (uint64_t)file_size * 8;
    if (ne == 0 || ne > max_elems || (uint64_t)n_elems > max_elems / ne)
      fail(path, "tensor '" + ti.name + "': shape dimension " + std::to_string(ne) +
                     " is impossible for a file of " + std::to_string(file_size) + " bytes");
    ti.ne.push_back((int64_t)ne);
    n_elems *= (int64_t)ne;
  }
  return n_elems;
}

// One tensor info: name, shape, type and offset (relative to the data section; `data` not yet set).
GgufTensorInfo read_tensor_info(Reader& r, size_t file_size, size_t alignment, const std::string& path) {
  GgufTensorInfo ti;
  ti.name = std::string(r.read_string("tensor name"));
  const int64_t n_elems = read_shape(r, ti, file_size, path);
  uint32_t raw_type = r.read<uint32_t>("tensor type");
  auto tr = dtype_traits(raw_type);
  if (!tr) fail(path, "tensor '" + ti.name + "': unknown tensor type " + std::to_string(raw_type));
  ti.type = (DType)raw_type;
  if (ti.ne[0] % tr->block != 0)
    fail(path, "tensor '" + ti.name + "': row length " + std::to_string(ti.ne[0]) +
                   " is not a multiple of the " + tr->name + " block size " + std::to_string(tr->block));
  ti.bytes = dtype_bytes(ti.type, n_elems);
  ti.offset = r.read<uint64_t>("tensor offset");
  if (ti.offset % alignment != 0)
    fail(path, "tensor '" + ti.name + "': offset " + std::to_string(ti.offset) + " is not aligned to " +
                   std::to_string(alignment));
  return ti;
}

// Points each tensor at its data, which must lie inside the data section (from `data_start`, aligned
// past the tensor infos) and not overlap another's.
void place_tensor_data(std::vector<GgufTensorInfo>& tensors, const MappedFile& f, size_t data_start,
                       const std::string& path) {
  if (data_start > f.size() && !tensors.empty())
    fail(path, "truncated: tensor data section starts past the end of the file");
  size_t data_size = data_start <= f.size() ? f.size() - data_start : 0;
  std::vector<std::pair<uint64_t, size_t>> ranges;
  for (auto& ti : tensors) {
    if (ti.offset > data_size || ti.bytes > data_size - ti.offset)
      fail(path, "tensor '" + ti.name + "': data [" + std::to_string(ti.offset) + ", +" +
                     std::to_string(ti.bytes) + ") runs past the end of the file (data section is " +
                     std::to_string(data_size) + " bytes)");
    ti.data = f.data() + data_start + ti.offset;
    ranges.emplace_back(ti.offset, ti.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first)
      fail(path, "tensor data ranges overlap at offset " + std::to_string(ranges[i].first));
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  auto i = (uint32_t)t;
  return i < 13 ? names[i] : "unknown";
}

GgufFile::GgufFile(const std::string& path, bool map) : file_(std::make_shared<MappedFile>(path, map)) {
  Reader r(*file_);
  const Header h = read_header(r, *file_, path);
  version_ = h.version;
  kv_ = read_metadata(r, h.n_kv, path);
  alignment_ = read_alignment(find("general.alignment"), alignment_, path);
  if (h.n_tensors > r.remaining() / 24)  // name length + n_dims + type + offset at the least
    fail(path, "tensor count " + std::to_string(h.n_tensors) + " does not fit in the file");
  tensors_.reserve(h.n_tensors);
  for (uint64_t i = 0; i < h.n_tensors; ++i) {
    GgufTensorInfo ti = read_tensor_info(r, file_->size(), alignment_, path);
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second)
      fail(path, "duplicate tensor name '" + ti.name + "'");
    tensors_.push_back(std::move(ti));
  }
  place_tensor_data(tensors_, *file_, (r.pos() + alignment_ - 1) / alignment_ * alignment_, path);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
bool is_int(GgufType t) {
  return t != GgufType::F32 && t != GgufType::F64 && t != GgufType::STRING && t != GgufType::ARRAY;
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  auto s = get_string_opt(key);
  if (!s) fail(path(), "missing metadata key '" + key + "'");
  return *s;
}

std::optional<std::string> GgufFile::get_string_opt(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING)
    fail(path(), "metadata '" + key + "' has type " + gguf_type_name(v->type) + ", expected string");
  return std::string(v->s);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), "missing metadata key '" + key + "'");
  return get_int(key, 0);
}

int64_t GgufFile::get_int(const std::string& key, int64_t def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (!is_int(v->type))
    fail(path(), "metadata '" + key + "' has type " + gguf_type_name(v->type) + ", expected an integer");
  return v->i;
}

double GgufFile::get_float(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (v->type == GgufType::STRING || v->type == GgufType::ARRAY)
    fail(path(), "metadata '" + key + "' has type " + gguf_type_name(v->type) + ", expected a number");
  if (!std::isfinite(v->f)) fail(path(), "metadata '" + key + "' is not finite");
  return v->f;
}

bool GgufFile::get_bool(const std::string& key, bool def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (v->type != GgufType::BOOL)
    fail(path(), "metadata '" + key + "' has type " + gguf_type_name(v->type) + ", expected bool");
  return v->i != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), "missing metadata key '" + key + "'");
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING)
    fail(path(), "metadata '" + key + "' is not an array of strings");
  return {v->strings.begin(), v->strings.end()};
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), "missing metadata key '" + key + "'");
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::F32)
    fail(path(), "metadata '" + key + "' is not an array of f32");
  std::vector<float> out(v->count);
  if (v->count) std::memcpy(out.data(), v->elems, v->count * 4);
  return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) fail(path(), "missing metadata key '" + key + "'");
  if (v->type != GgufType::ARRAY || (v->elem_type != GgufType::I32 && v->elem_type != GgufType::U32))
    fail(path(), "metadata '" + key + "' is not an array of i32");
  std::vector<int32_t> out(v->count);
  if (v->count) std::memcpy(out.data(), v->elems, v->count * 4);
  return out;
}

}  // namespace fasa
