#include "calib/auto_profile.h"

#include <unistd.h>

#include <algorithm>
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
std::map<std::string, Profile> g_kept;  // weights hash -> this process's auto profile

}  // namespace

bool wants_auto_profile(const PolicyOptions& o) {
  return o.profile == "auto" || (o.profile.empty() && !o.synthetic_profile);
}

std::string auto_profile_path(const Model& m) {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache";
  else return "";
  const ModelFingerprint f = fingerprint(m);
  return dir + "/fasa/profiles/" + f.arch + "-" + f.weights_hash + ".profile.json";
}

std::optional<Profile> find_auto_profile(const Model& m) {
  const ModelFingerprint f = fingerprint(m);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_kept.find(f.weights_hash); it != g_kept.end() && it->second.model == f) return it->second;
  }
  const std::string path = auto_profile_path(m);
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  try {
    Profile p = load_profile(path);
    check_profile_matches(p, m, path);
    return p;
  } catch (const Error&) {
    return std::nullopt;  // a stale or damaged cache file is made again
  }
}

std::string keep_auto_profile(const Model& m, const Profile& p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_kept[p.model.weights_hash] = p;
  }
  const std::string path = auto_profile_path(m);
  if (path.empty()) return "";
  // Written whole under a temporary name, then renamed: a reader never sees half a file.
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    save_profile(p, tmp);
    fs::rename(tmp, path, ec);
    if (!ec) return path;
  } catch (const Error&) {
  }
  std::error_code ignored;
  fs::remove(tmp, ignored);
  return "";
}

PromptProfiler::PromptProfiler(const Model& m) : model_(m), meter_(m.config, kTopK, kMinPos, kStride) {}

void PromptProfiler::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  // Only the first kMinTokens positions: the cost stays the same however long the prompt is.
  if (p0 < kMinTokens) meter_.on_queries(layer, p0, (int)std::min<int64_t>(n, kMinTokens - p0), q, cache);
}

Profile PromptProfiler::profile(int64_t n_past) const {
  Profile p = profile_from_agreement(model_, meter_, default_n_tip(model_.config), kTopK, kMinPos);
  p.calibration_text = "auto: a prompt's prefill";
  p.calibration_tokens = n_past;
  return p;
}

Profile make_auto_profile(const Model& m, const std::vector<int32_t>& prompt) {
  PromptProfiler profiler(m);
  SessionOptions so;
  so.n_ctx = (int64_t)prompt.size();
  Session s(m, so);
  s.set_observer(&profiler);
  s.eval(prompt);
  if (!profiler.ready(s.n_past()))
    throw Error("automatic FASA profile: the prompt has " + std::to_string(prompt.size()) + " tokens, fewer than " +
                std::to_string(PromptProfiler::kMinTokens));
  Profile p = profiler.profile(s.n_past());
  keep_auto_profile(m, p);
  return p;
}

}  // namespace fasa
