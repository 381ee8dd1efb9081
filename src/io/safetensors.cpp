#include "io/safetensors.h"

#include "io/json_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/json_file.h"
#include "fasa/error.h"

namespace fasa {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit
constexpr size_t kMaxDims = 8;

DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  fail(path, "tensor '" + name + "': dtype " + s + " is not supported (F32, F16, BF16)");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path, bool map) : file_(std::make_shared<MappedFile>(path, map)) {
  const size_t size = file_->size();
  if (size < 8) fail(path, "truncated: no safetensors header length");
  uint64_t header_len;
  std::memcpy(&header_len, file_->data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                   std::to_string(size) + " bytes)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_->data() + 8, file_->data() + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint8_t* data = file_->data() + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() || !entry["shape"].is_array() ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      fail(path, "tensor '" + name + "': malformed header entry");
    SafetensorInfo ti;
    ti.name = name;
    ti.file = path;
    ti.type = parse_dtype(entry["dtype"].get<std::string>(), path, name);
    if (entry["shape"].size() > kMaxDims) fail(path, "tensor '" + name + "': too many dimensions");
    uint64_t n_elems = 1;
    for (auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) fail(path, "tensor '" + name + "': shape holds a non-integer");
      uint64_t v = d.get<uint64_t>();
      if (v > data_size || (v != 0 && n_elems > data_size / v))
        fail(path, "tensor '" + name + "': shape is larger than the file");
      n_elems *= v;
      ti.shape.push_back((int64_t)v);
    }
    auto& offs = entry["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      fail(path, "tensor '" + name + "': data_offsets must be non-negative integers");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail(path, "tensor '" + name + "': data [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") runs past the end of the file (data section is " + std::to_string(data_size) +
                     " bytes)");
    ti.bytes = dtype_bytes(ti.type, (int64_t)n_elems);
    if (end - begin != ti.bytes)
      fail(path, "tensor '" + name + "': holds " + std::to_string(end - begin) + " bytes, its shape needs " +
                     std::to_string(ti.bytes));
    ti.data = data + begin;
    ranges.emplace_back(begin, end);
    tensors_.push_back(std::move(ti));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i - 1].second > ranges[i].first)
      fail(path, "tensor data ranges overlap at offset " + std::to_string(ranges[i].first));
}

SafetensorsModel::SafetensorsModel(const std::string& dir, bool map) {
  namespace fs = std::filesystem;
  std::vector<std::string> shard_paths;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_file(index.string(), "safetensors index");
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index.string(), "no 'weight_map' object");
    std::set<std::string> shards;
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) fail(index.string(), "weight_map['" + name + "'] is not a string");
      std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        fail(index.string(), "shard name '" + f + "' is not a plain file name");
      shards.insert(f);
    }
    for (auto& s : shards) shard_paths.push_back((fs::path(dir) / s).string());
  } else if (fs::exists(single)) {
    shard_paths.push_back(single.string());
  } else {
    fail(dir, "no model.safetensors or model.safetensors.index.json");
  }
  for (auto& p : shard_paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p, map));
    for (auto& ti : files_.back()->tensors())
      if (!tensors_.emplace(ti.name, ti).second)
        fail(p, "tensor '" + ti.name + "' also appears in another shard");
  }
}

const SafetensorInfo* SafetensorsModel::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::shared_ptr<const MappedFile>> SafetensorsModel::mappings() const {
  std::vector<std::shared_ptr<const MappedFile>> out;
  for (auto& f : files_) out.push_back(f->mapping());
  return out;
}

}  // namespace fasa
