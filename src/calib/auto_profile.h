#pragma once
// FASA without a calibration step (docs/FASA.md §2, "Automatic profiles"): a prompt's dense prefill
// computes full attention anyway, so it measures the chunks' agreement on a sample of its own
// queries, and the profile derived from that is kept for the process and cached on disk per model
// (XDG cache dir), so that later runs start sparse at once. `fasa calibrate` stays for reproducible
// offline profiles.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "calib/agreement.h"
#include "calib/profile.h"
#include "fasa/options.h"

namespace fasa {

// Whether FASA's options ask for the automatic profile: --profile auto, or no --profile (unless
// the bench's synthetic one).
bool wants_auto_profile(const PolicyOptions& o);

// Where this model's auto profile is cached: $XDG_CACHE_HOME (else ~/.cache)/fasa/profiles/
// ARCH-WEIGHTSHASH.profile.json; "" when neither directory is known.
std::string auto_profile_path(const Model& m);
// This model's auto profile: the one kept earlier in this process, else the cached file (one that
// fails to load, was made for another model or another way is ignored; one that loads is kept).
std::optional<Profile> find_auto_profile(const Model& m);
// Keeps `p` for this process unless another was kept first (then every context of the process
// decodes with that one), and writes it to the cache (best effort: an unwritable cache only loses
// the file; concurrent writers each rename a whole file of their own).
struct KeptProfile {
  Profile profile;   // the process's automatic profile: `p`, or the one kept first
  bool mine = false;  // it is `p`
  std::string file;  // where `p` was written, or ""
};
KeptProfile keep_auto_profile(const Profile& p);  // for the model p.model names

// Observes a dense session's prefill (and dense decode steps): agreement of every query head's chunks
// on every kStride-th query of positions kMinPos..kMinTokens-1 (a fixed cost, however long the
// prompt). Once the context holds kMinTokens tokens, the measurement makes the profile.
class PromptProfiler : public AttentionObserver {
 public:
  static constexpr int64_t kMinTokens = 1024;  // shorter prompts decode densely until they grow
  static constexpr int64_t kMinPos = 128;
  static constexpr int kStride = 32;
  static constexpr int kTopK = 32;

  explicit PromptProfiler(const Model& m);
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;
  bool ready(int64_t n_past) const { return n_past >= kMinTokens && meter_.fc_queries() > 0; }
  // The profile measured so far. Samples of a prompt truncated while measuring stay: they are this
  // model's agreement on real text all the same.
  Profile profile() const;

 private:
  const Model& model_;
  AgreementMeter meter_;
};

// Prefills the first kMinTokens of `prompt` (at least that long) densely with a PromptProfiler and keeps the profile it
// makes, as a context does with its first long prompt: for evaluations, whose prefills are shared.
Profile make_auto_profile(const Model& m, const std::vector<int32_t>& prompt);

}  // namespace fasa
