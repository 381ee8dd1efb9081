#include "gpu/device_loader.h"

#include <string>

#include "fasa/error.h"

namespace fasa::gpu {

std::unique_ptr<DeviceModel> load_device_model(Model& model, int gpu_layers, int device_index) {
  const int n_layer = model.config.n_layer;
  if (gpu_layers == 0) return nullptr;
  if (gpu_layers > 0 && gpu_layers < n_layer)
    throw Error("-ngl " + std::to_string(gpu_layers) + ": this version runs all " + std::to_string(n_layer) +
                " layers on the GPU or none (-ngl 99 or -ngl 0)");
  std::unique_ptr<DeviceModel> device = load_vulkan_model(model, device_index);
  model.drop_file_pages();  // the device holds the weights now
  return device;
}

}  // namespace fasa::gpu
