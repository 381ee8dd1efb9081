// The settings of include/fasa/options.h read from text: the one parser behind the CLI's flags, the
// server's JSON fields and Python's keywords.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "fasa/error.h"
#include "fasa/options.h"
#include "util/options_text.h"

namespace fasa {

namespace {

[[noreturn]] void bad(std::string_view setting, const std::string& why, std::string_view text) {
  throw Error(std::string(setting) + ": " + why + ", got '" + std::string(text) + "'");
}

// The whole of `text` as a number, or nothing.
bool read_double(std::string_view text, double& v) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(v);
}

template <typename Int>
Int read_int(std::string_view setting, std::string_view text, Int lo, Int hi) {
  Int v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    bad(setting, "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi), text);
  return v;
}

bool read_bool(std::string_view setting, std::string_view text) {
  if (text == "true" || text == "on" || text == "1") return true;
  if (text == "false" || text == "off" || text == "0") return false;
  bad(setting, "must be on or off (true or false)", text);
}

template <typename Enum>
Enum value_of(Enum e) { return e; }
DType value_of(const KvTypeName& k) { return k.type; }

// The value of `values` (enum values, or kKvTypes' rows) whose name_of is text.
template <typename Item, size_t N>
auto read_enum(std::string_view setting, std::string_view text, const Item (&values)[N]) {
  std::string names;
  for (const Item& item : values) {
    if (text == name_of(value_of(item))) return value_of(item);
    names += std::string(names.empty() ? "" : " or ") + "'" + name_of(value_of(item)) + "'";
  }
  bad(setting, "must be " + names, text);
}

constexpr FcSharing kSharings[] = {FcSharing::Head, FcSharing::Group};
constexpr FcAlloc kAllocs[] = {FcAlloc::Uniform, FcAlloc::Adaptive};
constexpr FcRank kRanks[] = {FcRank::Auto, FcRank::Agreement, FcRank::Magnitude};

using Setter = std::function<void(PolicyOptions&, std::string_view name, std::string_view text)>;

const std::map<std::string, Setter, std::less<>>& setters() {
  static const std::map<std::string, Setter, std::less<>> table = [] {
    std::map<std::string, Setter, std::less<>> t;
    auto count = [](int PolicyOptions::*field, int lo) {
      return [field, lo](PolicyOptions& o, std::string_view n, std::string_view v) { o.*field = read_int(n, v, lo, 1 << 30); };
    };
    t["attn"] = [](PolicyOptions& o, std::string_view n, std::string_view v) {
      if (v.empty()) bad(n, "must name a policy", v);
      o.attn = v;
    };
    t["profile"] = [](PolicyOptions& o, std::string_view, std::string_view v) { o.profile = v; };
    t["synthetic_profile"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.synthetic_profile = read_bool(n, v); };
    t["budget"] = [](PolicyOptions& o, std::string_view, std::string_view v) { o.budget = Budget::parse(v); };
    t["fcs"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.fcs = read_int(n, v, 1, 512); };
    t["fc_sharing"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.fc_sharing = read_enum(n, v, kSharings); };
    t["fc_alloc"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.fc_alloc = read_enum(n, v, kAllocs); };
    t["fc_rank"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.fc_rank = read_enum(n, v, kRanks); };
    t["dense_layers"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.dense_layers = parse_layer_list(v, n); };
    t["sink"] = count(&PolicyOptions::sink, 0);
    t["recent"] = count(&PolicyOptions::recent, 0);
    t["tip_mass"] = [](PolicyOptions& o, std::string_view n, std::string_view v) {
      double mass;
      if (!read_double(v, mass) || mass < 0 || mass > 1) bad(n, "must be a share from 0 to 1 (0: off)", v);
      o.tip_mass = mass;
    };
    t["seed_policy"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.seed = read_int<uint64_t>(n, v, 0, UINT64_MAX); };
    t["sparq_r"] = count(&PolicyOptions::sparq_r, 0);
    t["ds_channels"] = count(&PolicyOptions::ds_channels, 0);
    t["snapkv_window"] = count(&PolicyOptions::snapkv_window, 1);
    t["snapkv_every"] = count(&PolicyOptions::snapkv_every, 0);
    t["kv_type"] = [](PolicyOptions& o, std::string_view n, std::string_view v) {
      o.cache.types.k = o.cache.types.v = read_enum(n, v, kKvTypes);
    };
    t["cache_type_k"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.cache.types.k = read_enum(n, v, kKvTypes); };
    t["cache_type_v"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.cache.types.v = read_enum(n, v, kKvTypes); };
    t["tip_int8"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.cache.types.tip_int8 = read_bool(n, v); };
    t["kv_offload"] = [](PolicyOptions& o, std::string_view n, std::string_view v) {
      KvOffloadOptions& k = o.cache.offload;
      if (v.empty() || v == "none") {
        k.tier = KvOffloadOptions::Tier::None, k.dir.clear();
      } else if (v == "ram") {
        k.tier = KvOffloadOptions::Tier::Ram, k.dir.clear();
      } else if (v.substr(0, 5) == "file:" && v.size() > 5) {
        k.tier = KvOffloadOptions::Tier::File, k.dir = v.substr(5);
      } else {
        bad(n, "must be 'ram' or 'file:DIR'", v);
      }
    };
    t["kv_fast_limit"] = [](PolicyOptions& o, std::string_view n, std::string_view v) {
      o.cache.offload.fast_limit = v.empty() ? 0 : parse_byte_size(v, n);
    };
    t["kv_prefetch"] = [](PolicyOptions& o, std::string_view n, std::string_view v) { o.cache.offload.prefetch = read_bool(n, v); };
    return t;
  }();
  return table;
}

}  // namespace

Budget Budget::parse(std::string_view text) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string_view number = percent ? text.substr(0, text.size() - 1) : text;
  double v = 0;
  if (!read_double(number, v) || v <= 0 || (percent && v > 100))
    bad("budget", "must be a token count (256) or a share of the context written as one (0.5, 50%)", text);
  if (percent) return share(v / 100);
  // "1.0" is the whole context (a share, as JSON writes a float 1), "1" one token.
  if (number.find_first_of(".eE") != std::string_view::npos) {
    if (v > 1) bad("budget", "a share of the context must be at most 1 (100%); a token count has no decimal point", text);
    return share(v);
  }
  if (v != std::floor(v) || v > 1e12) bad("budget", "a token count must be a whole number", text);
  return count((int64_t)v);
}

std::string Budget::str() const {
  if (!fraction) return std::to_string((int64_t)value);
  char buf[32];
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);  // the shortest text that reads back
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // 1.0 stays a share when parsed again
  return s;
}

std::string Budget::describe() const {
  if (!fraction) return str() + (value == 1 ? " token" : " tokens");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", 100 * value);  // 7%, not 7.000000000000001%
  return std::string(buf) + "% of the context";
}

void set_policy_option(PolicyOptions& o, std::string_view name, std::string_view value) {
  const auto it = setters().find(name);
  if (it == setters().end()) {
    std::string names;
    for (const auto& [known, setter] : setters()) names += (names.empty() ? "" : ", ") + known;
    throw Error("no setting '" + std::string(name) + "' (the settings: " + names + ")");
  }
  it->second(o, name, value);
}

const std::vector<std::string>& policy_option_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, setter] : setters()) n.push_back(name);
    return n;
  }();
  return names;
}

const char* name_of(FcSharing s) { return s == FcSharing::Head ? "head" : "group"; }
const char* name_of(FcAlloc a) { return a == FcAlloc::Uniform ? "uniform" : "adaptive"; }
const char* name_of(FcRank r) {
  return r == FcRank::Auto ? "auto" : r == FcRank::Agreement ? "agreement" : "magnitude";
}
const char* name_of(DType t) {
  for (const KvTypeName& k : kKvTypes)
    if (k.type == t) return k.name;
  return "(not a KV type)";
}

std::string layer_list_str(const std::vector<int>& layers) {
  std::string s;
  for (int l : layers) {
    if (!s.empty()) s += ',';
    s += std::to_string(l);
  }
  return s;
}

std::string offload_str(const KvOffloadOptions& o) {
  return !o.offloaded() ? "" : o.tier == KvOffloadOptions::Tier::Ram ? "ram" : "file:" + o.dir;
}

std::vector<int> parse_layer_list(std::string_view text, std::string_view setting) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    if (!item.empty()) out.push_back(read_int(setting, item, 0, 1 << 20));
    at = comma + 1;
  }
  return out;
}

size_t parse_byte_size(std::string_view text, std::string_view setting) {
  double unit = 1;
  std::string_view number = text;
  if (!text.empty()) {
    const char u = (char)std::toupper((unsigned char)text.back());
    const double units[] = {1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    if (const size_t k = std::string_view("KMGT").find(u); k != std::string_view::npos) unit = units[k], number.remove_suffix(1);
  }
  double v = -1;
  if (!read_double(number, v) || !(v > 0) || v * unit > 1e18) bad(setting, "must be a byte count (e.g. 512M, 2G)", text);
  return (size_t)(v * unit);
}

}  // namespace fasa
