#include "eval/policy_runs.h"

#include <algorithm>

#include "eval/decode_eval.h"
#include "fasa/error.h"

namespace fasa {

namespace {

const std::vector<std::string> kListSettings = {"fcs",  "fc_alloc", "fc_sharing", "tip_mass",      "sink",
                                                "recent", "sparq_r", "ds_channels", "snapkv_window", "snapkv_every"};

// `spec`'s policy name, and its settings applied to `o`.
std::string apply_spec(const std::string& spec, PolicyOptions& o) {
  size_t at = spec.find(':');
  const std::string name = spec.substr(0, at);
  while (at != std::string::npos) {
    const size_t next = spec.find(':', at + 1);
    const std::string setting = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    const size_t eq = setting.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("attn '" + spec + "': '" + setting + "' is not SETTING=VALUE (e.g. fasa:fcs=4)");
    set_policy_option(o, setting.substr(0, eq), setting.substr(eq + 1));
    at = next;
  }
  set_policy_option(o, "attn", name);
  return name;
}

}  // namespace

bool is_list_setting(const std::string& name) {
  return std::find(kListSettings.begin(), kListSettings.end(), name) != kListSettings.end();
}

std::vector<PolicyRun> policy_runs(const Model& m, const std::vector<std::string>& specs, const PolicyOptions& base) {
  std::vector<PolicyRun> runs;
  for (const std::string& spec : specs) {
    PolicyRun r{"", base, ""};
    r.name = apply_spec(spec, r.options);
    r.variant = policy_variant(r.name, r.options, m);
    if (std::none_of(runs.begin(), runs.end(), [&](const PolicyRun& o) { return o.name == r.name && o.variant == r.variant; }))
      runs.push_back(std::move(r));
  }
  return runs;
}

std::vector<std::string> cross_settings(const std::vector<std::string>& specs, const SettingLists& lists) {
  std::vector<std::string> out = specs;
  for (const auto& [setting, values] : lists) {
    std::vector<std::string> next;
    for (const std::string& s : out)
      for (const std::string& v : values) next.push_back(s + ":" + setting + "=" + v);
    out = std::move(next);
  }
  return out;
}

}  // namespace fasa
