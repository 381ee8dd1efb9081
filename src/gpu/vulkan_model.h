#pragma once
// A Llama-family model on a Vulkan device (the DeviceModel of model/device.h): every weight resident
// there, and each session's forward pass one recorded list of dispatches — embedding, per layer
// norm, Q/K/V, RoPE, the F16 KV cache's new row, attention, output, SwiGLU MLP —, submitted once per
// token with only the token, its position and RoPE's cos/sin written by the host.
#include <memory>
#include <string>
#include <vector>

#include "gpu/device_loader.h"
#include "gpu/vulkan_device.h"
#include "model/model.h"

namespace fasa::gpu {

// A matrix's rows as stored, and the matvec shader of its type.
struct DeviceMatrix {
  std::shared_ptr<Buffer> data;  // [rows, cols] in the stored type (shared: a tied output is the embedding)
  std::string type;              // the type's gpu_shader ("q8_0"): picks matvec_TYPE / get_row_TYPE
  uint32_t rows = 0, cols = 0;
};

struct DeviceLayer {
  Buffer attn_norm, ffn_norm;           // [n_embd] floats
  Buffer bq, bk, bv, q_norm, k_norm;    // as LayerWeights' (empty buffers where the model has none)
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
};

class VulkanModel final : public DeviceModel {
 public:
  VulkanModel(const Model& model, int device_index);
  std::unique_ptr<DeviceSession> start(int64_t n_ctx, const DeviceSelection& selection) const override;
  std::string describe() const override;

  const Model& model;
  mutable VulkanDevice device;  // sessions record and submit on it (it locks what they share)
  DeviceMatrix tok_embd, output;
  Buffer output_norm;  // [n_embd]
  std::vector<DeviceLayer> layers;

 private:
  DeviceMatrix upload(const Matrix& m, const std::string& what);
  Buffer upload(const std::vector<float>& v, const std::string& what);
  int index_;
  size_t bytes_ = 0;  // weights on the device
};

}  // namespace fasa::gpu
