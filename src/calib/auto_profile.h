#pragma once
// FASA without a calibration step (docs/FASA.md §2, "Automatic profiles"): a prompt's dense prefill
// computes full attention anyway, so it measures the chunks' agreement on a sample of its own
// queries, and the profile derived from that is kept by the Engine (AutoProfileStore) and cached on
// disk per model (XDG cache dir), so that later runs start sparse at once. `fasa calibrate` stays for reproducible
// offline profiles.
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calib/agreement.h"
#include "calib/profile.h"
#include "fasa/options.h"

namespace fasa {

// Whether FASA's options ask for the automatic profile: --profile auto, or no --profile (unless
// the bench's synthetic one).
bool wants_auto_profile(const PolicyOptions& o);

// The result of AutoProfileStore::keep.
struct KeptProfile {
  Profile profile;   // the store's automatic profile: `p`, or the one kept first
  bool mine = false;  // it is `p`
  std::string file;  // where `p` was written, or ""
};

// One model's automatic profile, shared by the contexts made for it: the Engine owns one (the
// server's slots share it), an evaluation run its own. Backed by a file per model in the user's
// cache dir, so later runs start sparse at once. Thread-safe.
class AutoProfileStore {
 public:
  explicit AutoProfileStore(const Model& m) : model_(m) {}
  // Where this model's profile is cached: $XDG_CACHE_HOME (else ~/.cache)/fasa/profiles/
  // ARCH-WEIGHTSHASH.profile.json; "" when neither directory is known.
  std::string path() const;
  // The profile kept earlier, else the cached file (one that fails to load, was made for another
  // model or another way is ignored; one that loads is kept).
  std::optional<Profile> find() const;
  // Keeps `p` unless another was kept first (then every context of the store decodes with that
  // one), and writes it to the cache (best effort: an unwritable cache only loses the file;
  // concurrent writers each rename a whole file of their own).
  KeptProfile keep(const Profile& p);
  const Model& model() const { return model_; }

 private:
  const ModelFingerprint& model_fingerprint() const;  // hashed once; call with mu_ held

  const Model& model_;
  mutable std::mutex mu_;
  mutable std::optional<ModelFingerprint> fingerprint_;
  mutable std::optional<Profile> kept_;
  uint64_t writes_ = 0;  // names each write's temporary file
};

// Observes a dense session's prefill (and dense decode steps): agreement of every query head's chunks
// on every kStride-th query of positions kMinPos..kMinTokens-1 (a fixed cost, however long the
// prompt). Once the context holds kMinTokens tokens, the measurement and a probe of those tokens
// (the chunk choice) make the profile.
class PromptProfiler : public AttentionObserver {
 public:
  static constexpr int64_t kMinTokens = 1024;  // shorter prompts decode densely until they grow
  static constexpr int64_t kMinPos = 128;
  static constexpr int kStride = 32;
  static constexpr int kTopK = 32;

  explicit PromptProfiler(const Model& m);
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;
  bool ready(int64_t n_past) const { return n_past >= kMinTokens && meter_.fc_queries() > 0; }
  // The profile measured so far, its chunk choice made on a probe of the prompt's first tokens (a
  // dense prefill of kMinTokens more: calib/chunk_choice.h). Samples of a prompt truncated while
  // measuring stay: they are this model's agreement on real text all the same.
  Profile profile(std::span<const int32_t> first_tokens) const;

 private:
  const Model& model_;
  AgreementMeter meter_;
};

// Prefills the first kMinTokens of `prompt` (at least that long) densely with a PromptProfiler and keeps the profile it
// makes in `store`, as a context does with its first long prompt: for evaluations, whose prefills are shared.
Profile make_auto_profile(AutoProfileStore& store, const std::vector<int32_t>& prompt);

}  // namespace fasa
