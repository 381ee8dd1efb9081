#include "calib/auto_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "calib/calibrate.h"
#include "calib/chunk_choice.h"
#include "fasa/error.h"

namespace fasa {

namespace fs = std::filesystem;

namespace {

// What an automatic profile records as its source: a cached file made another way (another stride or
// K, or `fasa calibrate`) is not one.
const std::string kSource = "auto: 1 in " + std::to_string(PromptProfiler::kStride) + " queries of a prompt's first " +
                            std::to_string(PromptProfiler::kMinTokens) + " tokens";

}  // namespace

bool wants_auto_profile(const PolicyOptions& o) {
  return o.profile == "auto" || (o.profile.empty() && !o.synthetic_profile);
}

const ModelFingerprint& AutoProfileStore::model_fingerprint() const {
  if (!fingerprint_) fingerprint_ = fingerprint(model_);
  return *fingerprint_;
}

std::string AutoProfileStore::path() const {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0] == '/') dir = x;  // relative: ignored (XDG)
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache";
  else return "";
  std::lock_guard<std::mutex> lock(mu_);
  const ModelFingerprint& f = model_fingerprint();
  return dir + "/fasa/profiles/" + f.arch + "-" + f.weights_hash + ".profile.json";
}

std::optional<Profile> AutoProfileStore::find() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_) return kept_;
  }
  const std::string file = path();
  std::error_code ec;
  if (file.empty() || !fs::exists(file, ec)) return std::nullopt;
  try {
    Profile p = load_profile(file);
    check_profile_matches(p, model_, file);
    if (p.calibration_text != kSource || p.top_k != PromptProfiler::kTopK || p.min_pos != PromptProfiler::kMinPos ||
        p.channel_qk.empty() || !p.choice)  // (made before DoubleSparse's channels or the chunk choice)
      return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    if (!kept_) kept_ = std::move(p);  // parsed once
    return kept_;
  } catch (const Error&) {
    return std::nullopt;  // a stale or damaged cache file is made again
  }
}

KeptProfile AutoProfileStore::keep(const Profile& p) {
  std::string tmp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (p.model != model_fingerprint()) throw Error("automatic profile: made for another model than its store's");
    if (kept_) return {*kept_, false, ""};  // another context was first
    kept_ = p;
    // Each write its own name: other stores of this process (engines, evaluations) write the same file.
    tmp = ".tmp" + std::to_string(getpid()) + "-" + std::to_string((uintptr_t)this) + "-" + std::to_string(writes_++);
  }
  const std::string file = path();
  if (file.empty()) return {p, true, ""};
  tmp = file + tmp;
  try {
    std::error_code ec;
    fs::create_directories(fs::path(file).parent_path(), ec);
    save_profile(p, tmp);
    fs::rename(tmp, file, ec);
    if (!ec) return {p, true, file};
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

Profile PromptProfiler::profile(std::span<const int32_t> first_tokens) const {
  Profile p = profile_from_agreement(model_, meter_, default_n_tip(model_.config), kTopK, kMinPos);
  p.calibration_text = kSource;
  p.calibration_tokens = kMinTokens;
  const size_t n = std::min<size_t>(first_tokens.size(), kMinTokens);
  p.choice = choose_chunks(model_, p, {std::vector<int32_t>(first_tokens.begin(), first_tokens.begin() + n)});
  return p;
}

Profile make_auto_profile(AutoProfileStore& store, const std::vector<int32_t>& prompt) {
  const Model& m = store.model();
  if ((int64_t)prompt.size() < PromptProfiler::kMinTokens)
    throw Error("automatic FASA profile: the prompt has " + std::to_string(prompt.size()) + " tokens, fewer than " +
                std::to_string(PromptProfiler::kMinTokens));
  PromptProfiler profiler(m);
  SessionOptions so;
  so.n_ctx = PromptProfiler::kMinTokens;  // only these are measured
  Session s(m, so);
  s.set_observer(&profiler);
  s.prefill(std::span<const int32_t>(prompt.data(), PromptProfiler::kMinTokens));
  return store.keep(profiler.profile(prompt)).profile;
}

}  // namespace fasa
