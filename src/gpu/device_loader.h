#pragma once
// The devices a forward pass can run on besides the CPU (model/device.h's seam). Declared apart from
// the Vulkan headers: builds without Vulkan link no_vulkan.cpp, whose loader says so.
#include <memory>

#include "model/device.h"
#include "model/model.h"

namespace fasa::gpu {

// The model on the index-th Vulkan device, every layer. Throws fasa::Error where there is no such
// device (or no Vulkan in this build) or the model has what the device path does not run yet, naming
// it: a weight type without GPU shaders (gpu_dtype_list()), experts, sliding-window layers, Gemma's
// blocks.
std::unique_ptr<DeviceModel> load_vulkan_model(const Model& model, int device_index);

// What llama.cpp's `-ngl N --device VulkanI` ask for: null for 0 layers (the CPU), the model on the
// device for all of them (-1 or at least the layer count), its file pages then dropped from host memory
// (Model::drop_file_pages); fasa::Error for a part of them. Load the model without the CPU's packed
// copy where a device is asked for (LoadOptions::pack_for_cpu).
std::unique_ptr<DeviceModel> load_device_model(Model& model, int gpu_layers, int device_index);

}  // namespace fasa::gpu
