#include "eval/policy_runs.h"

#include <algorithm>
#include <cstdio>

#include "calib/auto_profile.h"
#include "fasa/error.h"
#include "sparse/policy.h"

namespace fasa {

namespace {

// The settings that take lists, and a copy of their values: policy_variant shows each one a policy
// reads, so runs whose options differ only in the others are one run.
const std::vector<std::string> kListSettings = {"fcs",    "fc_alloc", "fc_rank",     "fc_sharing",    "tip_mass",    "sink",
                                                "recent", "sparq_r",  "ds_channels", "snapkv_window", "snapkv_every"};
void copy_list_settings(const PolicyOptions& from, PolicyOptions& to) {
  to.fcs = from.fcs, to.fc_alloc = from.fc_alloc, to.fc_rank = from.fc_rank, to.fc_sharing = from.fc_sharing;
  to.tip_mass = from.tip_mass, to.sink = from.sink, to.recent = from.recent, to.sparq_r = from.sparq_r;
  to.ds_channels = from.ds_channels, to.snapkv_window = from.snapkv_window, to.snapkv_every = from.snapkv_every;
}

// The settings a policy reads of its own, for an error naming them.
std::string own_settings(const PolicyInfo& p) { return p.takes.empty() ? "none" : p.takes; }

// `spec`'s policy name, and its settings applied to `o`.
std::string apply_spec(const std::string& spec, PolicyOptions& o) {
  size_t at = spec.find(':');
  const std::string name = spec.substr(0, at);
  const PolicyInfo info = policy_info(name);
  while (at != std::string::npos) {
    const size_t next = spec.find(':', at + 1);
    const std::string setting = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    const size_t eq = setting.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("attn '" + spec + "': '" + setting + "' is not SETTING=VALUE (e.g. fasa:fcs=4)");
    if (setting.compare(0, eq, "attn") == 0 || setting.compare(0, eq, "budget") == 0)
      throw Error("attn '" + spec + "': give the " + setting.substr(0, eq) + " as its own flag, not in a policy's settings");
    if (!takes_setting(info, setting.substr(0, eq)))
      throw Error("attn '" + spec + "': " + name + " does not take " + setting.substr(0, eq) +
                  " (its own settings: " + own_settings(info) + ")");
    set_policy_option(o, setting.substr(0, eq), setting.substr(eq + 1));
    at = next;
  }
  set_policy_option(o, "attn", name);
  return name;
}

}  // namespace

std::string policy_variant(const PolicyOptions& o, const Model& m) {
  std::string kv;  // the cache's element types, where not llama.cpp's default
  if (o.cache.types.k != DType::F16 || o.cache.types.v != DType::F16)
    kv = std::string("kv=") + name_of(o.cache.types.k) +
         (o.cache.types.v == o.cache.types.k ? "" : std::string("/") + name_of(o.cache.types.v));
  const PolicyInfo info = policy_info(o.attn);
  if (info.dense) return kv;
  std::string v = info.has_k_dom && wants_auto_profile(o) ? "profile=auto " : "";
  if (const std::string own = info.settings ? info.settings(o, m) : ""; !own.empty()) v += own + " ";
  v += "dense=" + (o.dense_layers.empty() ? std::string("none") : layer_list_str(o.dense_layers));
  return kv.empty() ? v : v + " " + kv;
}

bool is_list_setting(const std::string& name) {
  return std::find(kListSettings.begin(), kListSettings.end(), name) != kListSettings.end();
}

std::vector<PolicyRun> policy_runs(const Model& m, const std::vector<std::string>& specs, const PolicyOptions& base) {
  std::vector<PolicyRun> runs;
  std::vector<std::string> settings;  // [runs] each run's spec after its name ("profile=a.json:fcs=4")
  for (const std::string& spec : specs) {
    PolicyRun r{"", base, ""};
    r.name = apply_spec(spec, r.options);
    r.variant = policy_variant(r.options, m);
    PolicyOptions unlisted = r.options;  // what the variant need not show
    copy_list_settings(base, unlisted);
    const bool seen = std::any_of(runs.begin(), runs.end(), [&](const PolicyRun& o) {
      PolicyOptions other = o.options;
      copy_list_settings(base, other);
      return o.variant == r.variant && other == unlisted;
    });
    if (seen) continue;
    runs.push_back(std::move(r));
    std::string own = spec.size() > runs.back().name.size() ? spec.substr(runs.back().name.size() + 1) : "";
    std::replace(own.begin(), own.end(), ':', ' ');
    settings.push_back(std::move(own));
  }
  // Runs apart by a setting the variant does not show (two profiles, two seeds) would share a label and
  // so a row of the tables: each of those labels adds its spec's own settings ("profile=b.json").
  std::vector<std::string> labels(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) labels[i] = runs[i].name + " " + runs[i].variant;
  for (size_t i = 0; i < runs.size(); ++i)
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1 && !settings[i].empty())
      runs[i].variant += (runs[i].variant.empty() ? "" : " ") + settings[i];
  return runs;
}

std::vector<std::string> cross_settings(const std::vector<std::string>& specs, const SettingLists& lists) {
  std::vector<std::string> out = specs;
  for (const auto& [setting, values] : lists) {
    std::vector<std::string> next;
    for (const std::string& s : out) {
      // the spec's own value wins, and a policy that does not read the setting runs once
      if (s.find(":" + setting + "=") != std::string::npos || !takes_setting(policy_info(s.substr(0, s.find(':'))), setting)) {
        next.push_back(s);
        continue;
      }
      for (const std::string& v : values) next.push_back(s + ":" + setting + "=" + v);
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace fasa
