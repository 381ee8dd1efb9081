// Built in place of the Vulkan backend where CMake found no Vulkan headers or glslc.
#include "fasa/error.h"
#include "gpu/device_loader.h"

namespace fasa::gpu {

std::unique_ptr<DeviceModel> load_vulkan_model(const Model& model, int) {
  fail(model.path, "this fasa was built without Vulkan (install Debian's libvulkan-dev and glslc, then build again): drop -ngl");
}

}  // namespace fasa::gpu
