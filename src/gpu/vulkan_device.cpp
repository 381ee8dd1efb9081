#include "gpu/vulkan_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fasa/error.h"
#include "gpu_shaders.h"  // generated from src/gpu/shaders/ (cmake/embed_spirv.cmake)

namespace fasa::gpu {

namespace {

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error("Vulkan: " + std::string(what) + " failed (VkResult " + std::to_string((int)r) + ")");
}

// A Vulkan info struct of type `s`, every other member zero.
template <class T>
T make(VkStructureType s) {
  T t{};
  t.sType = s;
  return t;
}

constexpr uint32_t kMaxPushBytes = 32;
constexpr uint32_t kSetsPerPool = 256;

// The instance, or a message saying what to install where there is no Vulkan 1.2 loader or driver.
VkInstance create_instance() {
  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "fasa";
  app.apiVersion = VK_API_VERSION_1_2;
  auto ici = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  if (vkCreateInstance(&ici, nullptr, &instance) != VK_SUCCESS)
    throw Error("Vulkan: no Vulkan 1.2 loader or driver (install one, e.g. Debian's mesa-vulkan-drivers, or drop -ngl)");
  return instance;
}

// GPUs first (discrete, integrated, virtual), CPU drivers such as lavapipe last.
int device_rank(VkPhysicalDevice d) {
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(d, &p);
  switch (p.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 4;
    default: return 3;
  }
}

// The index-th device in device_rank's order: Vulkan0 is the GPU where a machine has one, whatever
// order the loader lists them in.
VkPhysicalDevice pick_device(VkInstance instance, int index) {
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> all(n);
  vkEnumeratePhysicalDevices(instance, &n, all.data());
  std::stable_sort(all.begin(), all.end(),
                   [](VkPhysicalDevice a, VkPhysicalDevice b) { return device_rank(a) < device_rank(b); });
  if (n == 0) throw Error("Vulkan: no device found (install a driver, e.g. Debian's mesa-vulkan-drivers, or drop -ngl)");
  if (index < 0 || (uint32_t)index >= n)
    throw Error("Vulkan: no device " + std::to_string(index) + ": " + std::to_string(n) + " found (vulkaninfo --summary)");
  return all[index];
}

// What the shaders need to read F16 and int8 weights from storage buffers and convert them, chained
// for vkGetPhysicalDeviceFeatures2 and vkCreateDevice (not copyable: the chain points into it).
struct ShaderFeatures {
  VkPhysicalDevice8BitStorageFeatures s8 =
      make<VkPhysicalDevice8BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
  VkPhysicalDevice16BitStorageFeatures s16 =
      make<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  VkPhysicalDeviceShaderFloat16Int8Features f16i8 =
      make<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
  VkPhysicalDeviceFeatures2 chain = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);

  ShaderFeatures() {
    s16.pNext = &s8;
    f16i8.pNext = &s16;
    chain.pNext = &f16i8;
  }
  ShaderFeatures(const ShaderFeatures&) = delete;
  ShaderFeatures& operator=(const ShaderFeatures&) = delete;
  bool all() const {
    return s8.storageBuffer8BitAccess && s16.storageBuffer16BitAccess && f16i8.shaderFloat16 && f16i8.shaderInt8;
  }
};

void require_shader_features(VkPhysicalDevice physical, const std::string& name) {
  ShaderFeatures supported;
  vkGetPhysicalDeviceFeatures2(physical, &supported.chain);
  if (!supported.all())
    throw Error("Vulkan: " + name + " lacks 8/16-bit storage buffers or float16/int8 shader arithmetic");
}

uint32_t compute_queue_family(VkPhysicalDevice physical, const std::string& name) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, families.data());
  auto family = std::find_if(families.begin(), families.end(),
                             [](const VkQueueFamilyProperties& f) { return f.queueFlags & VK_QUEUE_COMPUTE_BIT; });
  if (family == families.end()) throw Error("Vulkan: " + name + " has no compute queue");
  return (uint32_t)(family - families.begin());
}

// A device with one queue of `family`, and only the features the shaders use.
VkDevice create_device(VkPhysicalDevice physical, uint32_t family) {
  const float priority = 1.0f;
  auto qci = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  ShaderFeatures enabled;
  enabled.s8.storageBuffer8BitAccess = enabled.s16.storageBuffer16BitAccess = VK_TRUE;
  enabled.f16i8.shaderFloat16 = enabled.f16i8.shaderInt8 = VK_TRUE;
  auto dci = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.pNext = &enabled.chain;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice device = VK_NULL_HANDLE;
  check(vkCreateDevice(physical, &dci, nullptr, &device), "vkCreateDevice");
  return device;
}

}  // namespace

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(device_, o.device_);
  std::swap(buffer_, o.buffer_);
  std::swap(memory_, o.memory_);
  std::swap(bytes_, o.bytes_);
  std::swap(mapped_, o.mapped_);
  return *this;
}

Buffer::~Buffer() {
  if (!device_) return;
  if (mapped_) vkUnmapMemory(device_, memory_);
  vkDestroyBuffer(device_, buffer_, nullptr);
  vkFreeMemory(device_, memory_, nullptr);
}

VulkanDevice::VulkanDevice(int index) {
  try {
    open(index);
  } catch (...) {  // (a constructor that throws runs no destructor)
    close();
    throw;
  }
}

void VulkanDevice::open(int index) {
  instance_ = create_instance();
  physical_ = pick_device(instance_, index);
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(physical_, &props);
  name_ = props.deviceName;
  if (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)  // lavapipe: right for tests, slow for work
    std::fprintf(stderr, "warning: Vulkan%d (%s) is a software driver running on the CPU: expect it slower than fasa's "
                 "own CPU path (drop -ngl)\n", index, name_.c_str());
  if (props.apiVersion < VK_API_VERSION_1_2) throw Error("Vulkan: " + name_ + " supports Vulkan 1.1 or less; 1.2 is needed");
  max_buffer_bytes_ = props.limits.maxStorageBufferRange;
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
  require_shader_features(physical_, name_);
  queue_family_ = compute_queue_family(physical_, name_);
  device_ = create_device(physical_, queue_family_);
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  auto fci = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  check(vkCreateFence(device_, &fci, nullptr, &fence_), "vkCreateFence");
}

VulkanDevice::~VulkanDevice() { close(); }

void VulkanDevice::close() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    for (auto& [name, p] : pipelines_) {
      vkDestroyPipeline(device_, p.pipeline, nullptr);
      vkDestroyPipelineLayout(device_, p.layout, nullptr);
      vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
    }
    vkDestroyFence(device_, fence_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
  device_ = VK_NULL_HANDLE;
  instance_ = VK_NULL_HANDLE;
}

uint32_t VulkanDevice::memory_type(uint32_t allowed, VkMemoryPropertyFlags wanted) const {
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i)
    if ((allowed & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & wanted) == wanted) return i;
  return UINT32_MAX;
}

Buffer VulkanDevice::buffer(size_t bytes, bool host_visible, const std::string& what) {
  if (bytes > max_buffer_bytes_)
    throw Error("Vulkan: " + what + " takes " + std::to_string(bytes) + " bytes, over " + name_ +
                "'s largest storage buffer (" + std::to_string(max_buffer_bytes_) + " bytes)");
  Buffer b;
  b.device_ = device_;
  b.bytes_ = bytes;
  auto bci = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bci.size = std::max<size_t>(bytes, 4);
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  check(vkCreateBuffer(device_, &bci, nullptr, &b.buffer_), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = memory_type(req.memoryTypeBits, host_visible ? visible : (VkMemoryPropertyFlags)VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (type == UINT32_MAX) type = memory_type(req.memoryTypeBits, 0);
  auto mai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = type;
  if (vkAllocateMemory(device_, &mai, nullptr, &b.memory_) != VK_SUCCESS)
    throw Error("Vulkan: out of device memory for " + what + " (" + std::to_string(bytes) + " bytes)");
  check(vkBindBufferMemory(device_, b.buffer_, b.memory_, 0), "vkBindBufferMemory");
  if ((memory_.memoryTypes[type].propertyFlags & visible) == visible)
    check(vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_), "vkMapMemory");
  return b;
}

void VulkanDevice::upload(const Buffer& b, const void* data, size_t bytes, size_t offset) {
  if (offset + bytes > b.bytes_) throw Error("Vulkan: an upload past the end of its buffer");
  if (b.mapped_) {
    std::memcpy(static_cast<uint8_t*>(b.mapped_) + offset, data, bytes);
    return;
  }
  // Through a host-visible staging buffer, 64 MiB at a time.
  const size_t chunk = std::min<size_t>(bytes, 64u << 20);
  Buffer staging = buffer(chunk, true, "a staging buffer");
  for (size_t at = 0; at < bytes; at += chunk) {
    const size_t n = std::min(chunk, bytes - at);
    std::memcpy(staging.mapped_, (const uint8_t*)data + at, n);
    auto r = record();
    VkBufferCopy region{0, offset + at, n};
    vkCmdCopyBuffer(r->cmd_, staging.buffer_, b.buffer_, 1, &region);
    auto barrier = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);  // the copy, before any shader reads it
    barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
    vkCmdPipelineBarrier(r->cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &barrier, 0,
                         nullptr, 0, nullptr);
    finish(*r);
    run({r.get()});
  }
}

void VulkanDevice::download(const Buffer& b, void* data, size_t bytes) {
  if (!b.mapped_) {
    Buffer staging = buffer(bytes, true, "a staging buffer");
    auto r = record();
    auto barrier = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);  // the shaders' writes, before the copy
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    vkCmdPipelineBarrier(r->cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &barrier, 0,
                         nullptr, 0, nullptr);
    VkBufferCopy region{0, 0, bytes};
    vkCmdCopyBuffer(r->cmd_, b.buffer_, staging.buffer_, 1, &region);
    barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(r->cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0,
                         nullptr);
    finish(*r);
    run({r.get()});
    std::memcpy(data, staging.mapped_, bytes);
    return;
  }
  std::memcpy(data, b.mapped_, bytes);
}

const Pipeline& VulkanDevice::pipeline(const std::string& name, int bindings) {
  std::lock_guard lock(mu_);
  auto it = pipelines_.find(name);
  if (it != pipelines_.end()) return it->second;
  const auto* shader = std::find_if(std::begin(kEmbeddedShaders), std::end(kEmbeddedShaders),
                                    [&](const EmbeddedShader& s) { return name == s.name; });
  if (shader == std::end(kEmbeddedShaders)) throw Error("Vulkan: no shader named " + name);
  Pipeline p;
  p.bindings = bindings;
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (int i = 0; i < bindings; ++i)
    b[i] = {(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  auto dl = make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  dl.bindingCount = (uint32_t)bindings;
  dl.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(device_, &dl, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kMaxPushBytes};
  auto pl = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &p.set_layout;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &push;
  check(vkCreatePipelineLayout(device_, &pl, nullptr, &p.layout), "vkCreatePipelineLayout");
  auto sm = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  sm.codeSize = shader->bytes;
  sm.pCode = reinterpret_cast<const uint32_t*>(shader->spirv);  // aligned to 4 (embed_spirv.cmake)
  VkShaderModule module;
  check(vkCreateShaderModule(device_, &sm, nullptr, &module), "vkCreateShaderModule");
  auto cp = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  cp.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, module,
              "main", nullptr};
  cp.layout = p.layout;
  const VkResult made = vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cp, nullptr, &p.pipeline);
  vkDestroyShaderModule(device_, module, nullptr);
  check(made, "vkCreateComputePipelines");
  return pipelines_.emplace(name, p).first->second;
}

std::unique_ptr<Recording> VulkanDevice::record() { return std::unique_ptr<Recording>(new Recording(*this)); }

void VulkanDevice::finish(Recording& r) {
  check(vkEndCommandBuffer(r.cmd_), "vkEndCommandBuffer");
  r.ended_ = true;
}

void VulkanDevice::run(std::initializer_list<const Recording*> recordings) {
  std::vector<VkCommandBuffer> cmds;
  for (const Recording* r : recordings) cmds.push_back(r->cmd_);
  std::lock_guard lock(mu_);
  auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.commandBufferCount = (uint32_t)cmds.size();
  si.pCommandBuffers = cmds.data();
  check(vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
  check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_, 1, &fence_), "vkResetFences");
  ++submits_;
}

Recording::Recording(VulkanDevice& dev) : dev_(dev) {
  auto pci = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pci.queueFamilyIndex = dev.queue_family_;
  check(vkCreateCommandPool(dev.device_, &pci, nullptr, &pool_), "vkCreateCommandPool");
  auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(dev.device_, &ai, &cmd_), "vkAllocateCommandBuffers");
  auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
}

Recording::~Recording() {
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(dev_.device_, p, nullptr);
  vkDestroyCommandPool(dev_.device_, pool_, nullptr);  // (frees cmd_)
}

VkDescriptorSet Recording::allocate_set(VkDescriptorSetLayout layout) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!pools_.empty()) {
      auto ai = make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
      ai.descriptorPool = pools_.back();
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &layout;
      VkDescriptorSet set;
      if (vkAllocateDescriptorSets(dev_.device_, &ai, &set) == VK_SUCCESS) return set;
    }
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * 8};
    auto pci = make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    pci.maxSets = kSetsPerPool;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &size;
    VkDescriptorPool pool;
    check(vkCreateDescriptorPool(dev_.device_, &pci, nullptr, &pool), "vkCreateDescriptorPool");
    pools_.push_back(pool);
  }
  throw Error("Vulkan: could not allocate a descriptor set");
}

void Recording::dispatch(const Pipeline& p, std::initializer_list<const Buffer*> buffers, const void* push,
                         size_t push_bytes, uint32_t groups, uint32_t groups_y) {
  if ((int)buffers.size() != p.bindings || push_bytes > kMaxPushBytes || ended_)
    throw Error("Vulkan: a dispatch does not match its shader's bindings");
  VkDescriptorSet set = allocate_set(p.set_layout);
  std::vector<VkDescriptorBufferInfo> infos;
  for (const Buffer* b : buffers) infos.push_back({b->handle(), 0, VK_WHOLE_SIZE});
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstSet = set;
    writes[i].dstBinding = (uint32_t)i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(dev_.device_, (uint32_t)writes.size(), writes.data(), 0, nullptr);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_bytes, push);
  // (at most 65535 workgroups in x everywhere: shaders with more rows loop over them)
  vkCmdDispatch(cmd_, std::min<uint32_t>(groups, 65535), groups_y, 1);
  // Every dispatch sees the writes of the ones before it (and the host sees the last one's).
  auto barrier = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr,
                       0, nullptr);
}

}  // namespace fasa::gpu
