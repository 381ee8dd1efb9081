#pragma once
// What an evaluation runs: each policy of --attn, optionally with settings of its own
// ("fasa:fcs=4:tip_mass=0.9"), and list flags (--fcs 4,8,16) giving a variant for each value.
#include <string>
#include <utility>
#include <vector>

#include "fasa/options.h"

namespace fasa {

struct Model;

// One policy variant of an evaluation: every budget is run with `options` (budget aside).
struct PolicyRun {
  std::string name;       // the registry's name ("fasa")
  PolicyOptions options;  // the run's base options with the spec's settings; attn = name
  std::string variant;    // policy_variant(): the settings that shape its choices, for the records
};

// The runs of `specs` ("NAME" or "NAME:SETTING=VALUE:...", the settings as set_policy_option reads
// them; no value with ':'; attn and budget are the run's own flags) over `base`, in order, each
// variant once: specs that differ only in list settings the policy does not read (full with fcs=4)
// are one run. Throws fasa::Error naming a bad policy or setting.
std::vector<PolicyRun> policy_runs(const Model& m, const std::vector<std::string>& specs, const PolicyOptions& base);

// The options that shape o.attn's choices, for the records ("fcs=8 sharing=group dense=0"): every list
// setting it reads, the profile when automatic, the cache's element types when not F16; the chunk
// count is the one used (resolved from the profile, or the synthetic profile's default).
std::string policy_variant(const PolicyOptions& o, const Model& m);

// Settings that may take a list of values in an evaluation (--fcs 4,8,16; Python fcs=[4, 8, 16]):
// those that shape a policy's choices and show in its variant.
bool is_list_setting(const std::string& name);
using SettingLists = std::vector<std::pair<std::string, std::vector<std::string>>>;  // setting -> values
// Every spec crossed with every value of each list: ("fasa", {fcs: 4, 8}) -> "fasa:fcs=4", "fasa:fcs=8";
// a spec that sets the list's setting itself keeps its value, and one whose policy does not take the
// setting (full, stream with fcs) stays as it is.
std::vector<std::string> cross_settings(const std::vector<std::string>& specs, const SettingLists& lists);

}  // namespace fasa
