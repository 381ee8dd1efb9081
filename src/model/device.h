#pragma once
// The seam to an accelerator (src/gpu/ implements it with Vulkan): a model whose whole forward pass
// runs there — its weights resident there, each session's KV cache there too. A Session given one
// (SessionOptions::device) hands it its tokens instead of running ForwardPass on the CPU.
#include <cstdint>
#include <memory>
#include <string>

namespace fasa {

class DeviceSession {
 public:
  virtual ~DeviceSession() = default;
  // Tokens at positions p0..p0+n-1 through the model, one step each (rows p0.. of the device's cache
  // are written); the last one's logits into `logits` ([n_vocab]) unless it is null.
  virtual void forward(const int32_t* tokens, int n, int64_t p0, float* logits) = 0;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  // A sequence's state on the device: a KV cache of n_ctx positions and the step's scratch.
  virtual std::unique_ptr<DeviceSession> start(int64_t n_ctx) const = 0;
  // What runs where, for run's header: "Vulkan0 (llvmpipe ...): all 6 layers, F16, 10.1 MiB".
  virtual std::string describe() const = 0;
};

}  // namespace fasa
