#include "calib/auto_profile.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "calib/calibrate.h"
#include "fasa/error.h"

namespace fasa {

namespace fs = std::filesystem;

namespace {

std::mutex g_mu;
std::map<std::string, Profile> g_kept;  // "ARCH-WEIGHTSHASH" -> this process's auto profile
std::atomic<uint64_t> g_writes{0};      // names each write's temporary file

// What an automatic profile records as its source: a cached file made another way (another stride or
// K, or `fasa calibrate`) is not one.
const std::string kSource = "auto: 1 in " + std::to_string(PromptProfiler::kStride) + " queries of a prompt's first " +
                            std::to_string(PromptProfiler::kMinTokens) + " tokens";

std::string key_of(const ModelFingerprint& f) { return f.arch + "-" + f.weights_hash; }

// auto_profile_path of the model with fingerprint f (hashing the weights once is enough).
std::string path_for(const ModelFingerprint& f) {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0] == '/') dir = x;  // relative: ignored (XDG)
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache";
  else return "";
  return dir + "/fasa/profiles/" + key_of(f) + ".profile.json";
}

}  // namespace

std::string auto_profile_path(const Model& m) { return path_for(fingerprint(m)); }

bool wants_auto_profile(const PolicyOptions& o) {
  return o.profile == "auto" || (o.profile.empty() && !o.synthetic_profile);
}

std::optional<Profile> find_auto_profile(const Model& m) {
  const ModelFingerprint f = fingerprint(m);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_kept.find(key_of(f)); it != g_kept.end() && it->second.model == f) return it->second;
  }
  const std::string path = path_for(f);
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  try {
    Profile p = load_profile(path);
    check_profile_matches(p, m, path);
    if (p.calibration_text != kSource || p.top_k != PromptProfiler::kTopK || p.min_pos != PromptProfiler::kMinPos ||
        p.channel_qk.empty())  // (made before DoubleSparse's channels were measured)
      return std::nullopt;
    std::lock_guard<std::mutex> lock(g_mu);
    const auto [it, added] = g_kept.try_emplace(key_of(f), p);  // parsed once per process
    return it->second.model == f ? it->second : p;
  } catch (const Error&) {
    return std::nullopt;  // a stale or damaged cache file is made again
  }
}

KeptProfile keep_auto_profile(const Profile& p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto [it, added] = g_kept.try_emplace(key_of(p.model), p);
    if (!added) return {it->second, false, ""};  // another context was first
  }
  const std::string path = path_for(p.model);
  if (path.empty()) return {p, true, ""};
  // Each write (threads of one process included) has its own temporary name.
  const std::string tmp = path + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(g_writes++);
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    save_profile(p, tmp);
    fs::rename(tmp, path, ec);
    if (!ec) return {p, true, path};
  } catch (const Error&) {
  }
  std::error_code ignored;
  fs::remove(tmp, ignored);
  return {p, true, ""};
}

PromptProfiler::PromptProfiler(const Model& m) : model_(m), meter_(m.config, kTopK, kMinPos, kStride) {}

void PromptProfiler::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  // Only the first kMinTokens positions: the cost stays the same however long the prompt is.
  if (p0 < kMinTokens) meter_.on_queries(layer, p0, (int)std::min<int64_t>(n, kMinTokens - p0), q, cache);
}

Profile PromptProfiler::profile() const {
  Profile p = profile_from_agreement(model_, meter_, default_n_tip(model_.config), kTopK, kMinPos);
  p.calibration_text = kSource;
  p.calibration_tokens = kMinTokens;
  return p;
}

Profile make_auto_profile(const Model& m, const std::vector<int32_t>& prompt) {
  if ((int64_t)prompt.size() < PromptProfiler::kMinTokens)
    throw Error("automatic FASA profile: the prompt has " + std::to_string(prompt.size()) + " tokens, fewer than " +
                std::to_string(PromptProfiler::kMinTokens));
  PromptProfiler profiler(m);
  SessionOptions so;
  so.n_ctx = PromptProfiler::kMinTokens;  // only these are measured
  Session s(m, so);
  s.set_observer(&profiler);
  s.eval(std::span<const int32_t>(prompt.data(), PromptProfiler::kMinTokens));
  return keep_auto_profile(profiler.profile()).profile;
}

}  // namespace fasa
