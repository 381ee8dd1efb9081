#pragma once
// A Vulkan compute device, with only what the forward pass needs: storage buffers, compute pipelines
// made from the embedded SPIR-V (src/gpu/shaders/), and a recorded list of dispatches submitted as
// many times as wanted, each followed by a full barrier.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace fasa::gpu {

class VulkanDevice;

// A storage buffer in device memory; `mapped` where that memory is host-visible (always so for
// host_visible buffers: the step's inputs and the logits).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  size_t bytes() const { return bytes_; }
  void* mapped() const { return mapped_; }
  VkBuffer handle() const { return buffer_; }

 private:
  friend class VulkanDevice;
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  size_t bytes_ = 0;
  void* mapped_ = nullptr;
};

struct Pipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  int bindings = 0;
};

// Dispatches recorded once into a command buffer, then run by VulkanDevice::run.
class Recording {
 public:
  ~Recording();
  // One dispatch of `groups` x `groups_y` workgroups; `buffers` bound to bindings 0, 1, ... in order;
  // `push`: the shader's push constants (at most 32 bytes).
  void dispatch(const Pipeline& p, std::initializer_list<const Buffer*> buffers, const void* push, size_t push_bytes,
                uint32_t groups, uint32_t groups_y);
  template <class Push>
  void dispatch(const Pipeline& p, std::initializer_list<const Buffer*> buffers, const Push& push, uint32_t groups,
                uint32_t groups_y = 1) {
    dispatch(p, buffers, &push, sizeof push, groups, groups_y);
  }

 private:
  friend class VulkanDevice;
  explicit Recording(VulkanDevice& dev);
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);
  VulkanDevice& dev_;
  VkCommandPool pool_ = VK_NULL_HANDLE;  // its own: recordings may be made on several threads at once
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools_;
  bool ended_ = false;
};

class VulkanDevice {
 public:
  // The index-th Vulkan device, GPUs before CPU drivers (0: the first). Throws fasa::Error naming what
  // is missing where there is no Vulkan loader, driver, such a device, Vulkan 1.2, a compute queue or
  // a feature the shaders need.
  explicit VulkanDevice(int index = 0);
  ~VulkanDevice();
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  const std::string& name() const { return name_; }  // the driver's device name, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"

  // A buffer of `bytes` (> 0; at most the device's largest storage buffer, else fasa::Error naming `what`).
  Buffer buffer(size_t bytes, bool host_visible, const std::string& what);
  // bytes into b at `offset`, through a staging buffer where b is not mapped.
  void upload(const Buffer& b, const void* data, size_t bytes, size_t offset = 0);
  void download(const Buffer& b, void* data, size_t bytes);      // (the same, the other way)
  // The embedded shader `name`, made on first use.
  const Pipeline& pipeline(const std::string& name, int bindings);

  std::unique_ptr<Recording> record();
  void finish(Recording& r);  // ends the recording
  // Submits the recordings in order and waits for them (one caller at a time).
  void run(std::initializer_list<const Recording*> recordings);
  int64_t submits() const { return submits_; }  // run()'s calls so far

 private:
  friend class Recording;
  friend class Buffer;
  void open(int index);  // the constructor's work
  void close();          // what exists of it, destroyed
  uint32_t memory_type(uint32_t allowed, VkMemoryPropertyFlags wanted) const;

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  std::string name_;
  size_t max_buffer_bytes_ = 0;
  std::mutex mu_;  // the queue, its fence and the pipelines: contexts on several threads share the device
  std::map<std::string, Pipeline> pipelines_;
  int64_t submits_ = 0;
};

}  // namespace fasa::gpu
