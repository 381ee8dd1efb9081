#pragma once
// Options a caller picks per context or per generation: the attention policy and the sampler.
// Shared by the public API, the CLI and the server.
#include <cstdint>
#include <string>

namespace fasa {

// Every policy's options, as the CLI takes them (each policy reads the ones it needs).
struct PolicyOptions {
  std::string attn = "full";       // policy name
  std::string profile;             // FASA profile path, or "auto" (as "" without synthetic_profile)
  bool synthetic_profile = false;  // FASA without a profile: seeded random chunks (speed runs only)
  std::string budget = "256";      // token count or fraction of the context
  int fcs = 0;                     // FASA chunks per head; 0 = the profile's
  std::string fc_sharing = "group";
  std::string fc_alloc = "uniform";  // FASA chunks per head: "uniform" (--fcs each) or "adaptive" (--fcs on average)
  std::string dense_layers = "0";  // comma-separated layers kept dense; "" = none
  int sink = 0;
  int recent = 0;
  uint64_t seed = 1;               // random policy
  int sparq_r = 0;                 // SparQ query dims; 0 = head_dim / 4
  int snapkv_window = 32;          // SnapKV observation window
  int snapkv_every = 32;           // SnapKV re-selection period during decode (0: never)
  std::string kv_type = "f16";     // KV cache elements, read by every policy: f16, f32 or q8_0
  std::string kv_type_k, kv_type_v;  // the keys' and the values' own types; "" = kv_type
  bool tip_int8 = false;           // FASA: TIP scans a Q8_0 copy of K_dom (no-op with q8_0 keys)
  std::string kv_offload;          // FASA-M: "" (all resident), "ram" or "file:DIR" for K_rest and V
  std::string kv_fast_limit;       // cap on the KV cache's fast memory: bytes, or with K/M/G; "" = none
  bool kv_prefetch = false;        // FASA-M: fetch the next layer's likely rows in the background

  const std::string& key_type() const { return kv_type_k.empty() ? kv_type : kv_type_k; }
  const std::string& value_type() const { return kv_type_v.empty() ? kv_type : kv_type_v; }
  bool operator==(const PolicyOptions&) const = default;
};

// Next-token choice: greedy at temperature 0, otherwise top-k -> temperature -> top-p, seeded.
struct SamplerOptions {
  float temperature = 0.0f;
  int top_k = 40;        // 0: no limit
  float top_p = 0.95f;   // 1: no limit
  uint64_t seed = 42;
};

}  // namespace fasa
