#pragma once
// The seam to an accelerator (src/gpu/ implements it with Vulkan): a model whose whole forward pass
// runs there — its weights resident there, each session's KV cache there too. A Session given one
// (SessionOptions::device) hands it its tokens instead of running ForwardPass on the CPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "select/attention_policy.h"

namespace fasa {

class DeviceSession {
 public:
  virtual ~DeviceSession() = default;
  // Tokens at positions p0..p0+n-1 through the model, one step each (rows p0.. of the device's cache
  // are written); the last one's logits into `logits` ([n_vocab]) unless it is null. A prompt's
  // tokens (`decode` false) attend densely, as the CPU's prefill; decode steps select.
  virtual void forward(const int32_t* tokens, int n, int64_t p0, bool decode, float* logits) = 0;
  // Rows p0..p0+n-1 of random keys and values (unit variance, as KvCache::fill_random), with what
  // the selection reads of them: a depth for benchmarks without a prefill.
  virtual void fill_random(int64_t p0, int64_t n, uint64_t seed) = 0;
  virtual size_t kv_bytes() const = 0;       // the cache in the device's memory: K, V and any K_dom planes
  virtual size_t host_kv_bytes() const = 0;  // FASA-M: the sparse layers' K and V in host memory
  virtual uint64_t host_read_bytes() const = 0;  // of them, the rows decode steps read so far
  // Each query head's rows at the last sparse layer of the latest decode step (read back from the
  // device: for tests and tools); empty where every layer is dense.
  virtual std::vector<std::vector<int32_t>> chosen_rows() const = 0;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  // A sequence's state on the device: a KV cache of n_ctx positions (with the K_dom planes `selection`
  // scores on) and the step's scratch; each decode step selects as `selection` says (dense, or FASA's).
  virtual std::unique_ptr<DeviceSession> start(int64_t n_ctx, const DeviceSelection& selection) const = 0;
  // What runs where, for run's header: "Vulkan0 (llvmpipe ...): all 6 layers, 10.1 MiB of weights".
  virtual std::string describe() const = 0;
};

}  // namespace fasa
