#pragma once
// Options a caller picks per context or per generation: the attention policy and the sampler.
// Shared by the public API, the CLI and the server.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fasa/dtype.h"

namespace fasa {

// A token budget: a count of rows ("256") or a share of the current context ("0.5", "50%", "1.0").
struct Budget {
  double value = 256;
  bool fraction = false;  // value is a share of the context in (0, 1]
  static Budget count(int64_t n) { return {(double)n, false}; }
  static Budget share(double f) { return {f, true}; }
  // A count is a whole number; a share is written as one (a decimal point or a %): "1" is one token,
  // "1.0" and "100%" the whole context. Throws fasa::Error naming the setting.
  static Budget parse(std::string_view text);
  int64_t tokens(int64_t n) const {  // rows to keep out of n (at least 1)
    const double t = fraction ? std::ceil(value * (double)n) : value;
    return std::max<int64_t>(1, (int64_t)std::min<double>(t, (double)INT64_MAX / 2));
  }
  std::string str() const;          // as parse reads it back
  std::string describe() const;     // for people: "256 tokens", "50% of the context"
  bool operator==(const Budget&) const = default;
};

// How the query heads of one KV head (GQA group) choose FASA's chunks: each its own (`head`, the
// paper's) or one shared set per KV head from the group's mean CA (`group`: one K_dom plane per KV head).
enum class FcSharing { Head, Group };
// How FASA ranks a head's chunks: `auto` (the default) takes the ranking and count the profile chose
// per layer by far-token recall (docs/FASA.md §2); `agreement` is the paper's contextual agreement on
// the calibration text; `magnitude` the mean |q|.|k| of a chunk's two dims (DoubleSparse's channel
// statistic summed per chunk).
enum class FcRank { Auto, Agreement, Magnitude };
// FASA's chunks per head: `uniform` (fcs each) or `adaptive` (fcs on average, by the profile).
enum class FcAlloc { Uniform, Adaptive };

// FASA-M: where K_rest and V of FASA's heads live, and the fast memory the KV cache may use.
struct KvOffloadOptions {
  enum class Tier { None, Ram, File };
  Tier tier = Tier::None;
  std::string dir;        // Tier::File: where the cache file goes
  size_t fast_limit = 0;  // bytes of fast memory the KV cache may use; 0: no cap
  bool prefetch = false;  // fetch the next layer's likely rows in a background thread
  bool offloaded() const { return tier != Tier::None; }
  bool operator==(const KvOffloadOptions&) const = default;
};

// KV cache elements: F16 (llama.cpp's default), F32 (exact) or Q8_0 (int8 blocks of 32), the element
// types the kernels read (fasa/dtype.h; kKvTypes lists them).
struct KvTypes {
  DType k = DType::F16;   // K_dom and K_rest
  DType v = DType::F16;
  bool tip_int8 = false;  // FASA: TIP scans a Q8_0 copy of K_dom (heads with a K_dom plane; no-op with Q8_0 keys)

  KvTypes() = default;
  KvTypes(DType both) : k(both), v(both) {}  // NOLINT: a cache "of type T" has keys and values of T
  KvTypes(DType keys, DType values, bool int8_tip = false) : k(keys), v(values), tip_int8(int8_tip) {}
  bool operator==(const KvTypes&) const = default;
};

// The KV cache's settings, read by every policy and by the session that makes the cache.
struct CacheOptions {
  KvTypes types;
  KvOffloadOptions offload;
  bool operator==(const CacheOptions&) const = default;
};

// The two registry policies the tools name by default (src/sparse/policies.inc has every row): dense
// attention, and the method this engine is built for, run beside it where a profile is given.
inline constexpr const char* kDenseAttn = "full";
inline constexpr const char* kFasaAttn = "fasa";

// Every policy's options (each policy reads the ones it needs) and the cache's.
struct PolicyOptions {
  std::string attn = kDenseAttn;   // policy name (policy_registry())
  std::string profile;             // FASA profile path, or "auto" (as "" without synthetic_profile)
  bool synthetic_profile = false;  // FASA without a profile: seeded random chunks (speed runs only)
  Budget budget;
  int fcs = 0;                     // FASA chunks per head; 0 = the profile's
  FcSharing fc_sharing = FcSharing::Group;
  FcAlloc fc_alloc = FcAlloc::Uniform;
  FcRank fc_rank = FcRank::Auto;
  std::vector<int> dense_layers = {0};  // model layers kept dense
  int sink = -1;    // first tokens always attended, inside the budget; -1: the policy's default (fasa 1, stream 8)
  int recent = -1;  // FASA: last tokens always attended, inside the budget; -1: its default (15)
  double tip_mass = 0;             // FASA: adaptive budget, the fewest top rows holding this softmax mass of TIP's scores; 0 = off
  uint64_t seed = 1;               // random policy
  int sparq_r = 0;                 // SparQ query dims; 0 = head_dim / 4
  int ds_channels = 0;             // DoubleSparse channels per KV head; 0 = as many dims as FASA's default chunks
  int snapkv_window = 32;          // SnapKV observation window
  int snapkv_every = 32;           // SnapKV re-selection period during decode (0: never)
  CacheOptions cache;
  bool operator==(const PolicyOptions&) const = default;
};

// The one parser of the settings above given as text — the CLI's flags, the server's JSON fields and
// Python's keywords all come through it. `name` is the setting's (attn, budget, fcs, fc_sharing,
// fc_alloc, fc_rank, dense_layers, sink, recent, tip_mass, seed_policy, sparq_r, ds_channels, snapkv_window, snapkv_every, profile,
// synthetic_profile, kv_type (keys and values), cache_type_k, cache_type_v, tip_int8, kv_offload,
// kv_fast_limit, kv_prefetch); errors name it. Policy names are checked when a context is made.
void set_policy_option(PolicyOptions& o, std::string_view name, std::string_view value);
const std::vector<std::string>& policy_option_names();

const char* name_of(FcSharing s);  // "head", "group"
const char* name_of(FcAlloc a);    // "uniform", "adaptive"
const char* name_of(FcRank r);     // "auto", "agreement", "magnitude"
const char* name_of(DType t);      // a KV element type's setting: "f16", "f32", "q8_0"
std::string layer_list_str(const std::vector<int>& layers);  // "0,2"; "" for none
std::string offload_str(const KvOffloadOptions& o);         // "", "ram" or "file:DIR"

// Next-token choice: greedy at temperature 0, otherwise top-k -> temperature -> top-p, seeded.
struct SamplerOptions {
  float temperature = 0.0f;
  int top_k = 40;        // 0: no limit
  float top_p = 0.95f;   // 1: no limit
  uint64_t seed = 42;
};

}  // namespace fasa
