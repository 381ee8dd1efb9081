#include "gpu/vulkan_model.h"

#include <cstdio>

#include "fasa/error.h"

namespace fasa::gpu {

namespace {

// The shaders' name for t's rows (its traits' row), null where the device has none.
const char* shader_type(DType t) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(t));
  return tr ? tr->gpu_shader : nullptr;
}

// Throws naming what the device path does not run (yet), before any device is opened.
void check_supported(const Model& model) {
  const ModelConfig& c = model.config;
  const std::string& path = model.path;
  const char* missing = c.n_expert > 0          ? "mixtures of experts"
                        : c.sliding_window > 0  ? "sliding-window layers"
                        : c.post_norms || c.gelu_ffn || c.embd_scale || c.final_softcap > 0 ? "Gemma's blocks"
                                                                                            : nullptr;
  if (!missing && c.head_dim > 256) missing = "heads of more than 256 dims";
  if (missing) fail(path, std::string("Vulkan: ") + missing + " (" + c.arch + ") do not run on the device yet: drop -ngl");
  const ModelWeights& w = model.weights;
  std::vector<const Matrix*> matrices = {&w.tok_embd, &w.output};
  for (const LayerWeights& L : w.layers)
    for (const Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) matrices.push_back(m);
  for (const Matrix* m : matrices)
    if (!shader_type(m->type))
      fail(path, std::string("Vulkan: ") + dtype_name(m->type) +
                     " weights are not on the device yet (" + gpu_dtype_list() + " are): drop -ngl");
}

}  // namespace

std::unique_ptr<DeviceModel> load_vulkan_model(const Model& model, int device_index) {
  check_supported(model);
  return std::make_unique<VulkanModel>(model, device_index);
}

VulkanModel::VulkanModel(const Model& m, int device_index) : model(m), device(device_index), index_(device_index) {
  const ModelWeights& w = m.weights;
  tok_embd = upload(w.tok_embd, "token_embd");
  output = w.output.data == w.tok_embd.data ? tok_embd : upload(w.output, "output");
  output_norm = upload(w.output_norm, "output_norm");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string at = "blk." + std::to_string(l) + ".";
    DeviceLayer& d = layers.emplace_back();
    d.attn_norm = upload(L.attn_norm, at + "attn_norm");
    d.ffn_norm = upload(L.ffn_norm, at + "ffn_norm");
    d.bq = upload(L.bq, at + "attn_q.bias");
    d.bk = upload(L.bk, at + "attn_k.bias");
    d.bv = upload(L.bv, at + "attn_v.bias");
    d.q_norm = upload(L.q_norm, at + "attn_q_norm");
    d.k_norm = upload(L.k_norm, at + "attn_k_norm");
    d.wq = upload(L.wq, at + "attn_q");
    d.wk = upload(L.wk, at + "attn_k");
    d.wv = upload(L.wv, at + "attn_v");
    d.wo = upload(L.wo, at + "attn_output");
    d.gate = upload(L.w_gate, at + "ffn_gate");
    d.up = upload(L.w_up, at + "ffn_up");
    d.down = upload(L.w_down, at + "ffn_down");
  }
}

DeviceMatrix VulkanModel::upload(const Matrix& m, const std::string& what) {
  const char* type = shader_type(m.type);  // (check_supported saw it is one)
  const size_t bytes = (size_t)m.rows * m.row_bytes;
  DeviceMatrix d{std::make_shared<Buffer>(device.buffer(bytes, false, what)), type, (uint32_t)m.rows, (uint32_t)m.cols};
  device.upload(*d.data, m.data, bytes);
  bytes_ += bytes;
  return d;
}

Buffer VulkanModel::upload(const std::vector<float>& v, const std::string& what) {
  Buffer b = device.buffer(std::max<size_t>(v.size(), 1) * sizeof(float), false, what);
  if (!v.empty()) device.upload(b, v.data(), v.size() * sizeof(float));
  bytes_ += v.size() * sizeof(float);
  return b;
}

std::string VulkanModel::describe() const {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", bytes_ / 1048576.0);
  return "Vulkan" + std::to_string(index_) + " (" + device.name() + "): all " + std::to_string(layers.size()) +
         " layers, " + mib + " of weights, F16 KV cache";
}

}  // namespace fasa::gpu
