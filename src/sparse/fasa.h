#pragma once
// FASA (docs/FASA.md §4): per decode step, layer and query head,
//   TIP: score every cached token on only the head's dominant chunks, S_j = q_dom . k_dom_j;
//   keep the top N_fac (the budget), optionally with forced sink and recent tokens inside it;
//   FAC: exact attention over the gathered full rows (done by the session's gathered attention).
// The dominant dims are stored as the K_dom plane of the cache, so TIP streams only those bytes.
#include <vector>

#include "calib/profile.h"
#include "sparse/policy.h"

namespace fasa {

struct FasaOptions {
  Budget budget{256, false};
  int n_tip = 0;                        // chunks per head; 0 = the profile's (Profile::setting)
  FcSharing sharing = FcSharing::Group;
  FcRank rank = FcRank::Auto;           // how the profile's chunks are ranked (Auto: as the profile chose per layer)
  bool adaptive = false;                // chunks per head by concentration (adaptive_chunk_counts), n_tip on average
                                        // (with Auto: each layer's chosen ranking, not its chosen count)
  std::vector<int> dense_layers = {0};  // layers that keep full attention
  int sink = 0;    // first tokens always kept, inside the budget (forced_rows: at most half of it); 0 here, as the paper
  int recent = 0;  // last tokens always kept, inside the budget; 0 here, as the paper
  // fasa's defaults where PolicyOptions leaves them (-1): the first token, where attention sinks, and the
  // last 15 rows. On SmolLM2-135M they cut KL by 40 % at 256 of 4096 tokens, 30 % at 1/16 (docs/RESULTS.md).
  static constexpr int kDefaultSink = 1, kDefaultRecent = 15;
  double mass = 0;                      // > 0: adaptive budget, TIP's top rows up to this softmax mass (tip_top_rows)
};

class FasaPolicy final : public SparsePolicy {
 public:
  FasaPolicy(const Profile& profile, const ModelConfig& config, const FasaOptions& opts);
  std::string_view name() const override { return "fasa"; }
  std::string summary() const override;  // with the budget and the share of key dims TIP reads

  // Mean share of key dims in the K_dom planes of the sparse layers: what TIP reads per token.
  double kdom_share() const;
  // K_dom dims this query head scores on, as positions within its KV head's K_dom plane.
  const std::vector<int>& scored_dims(int layer, int head) const { return dims_[(size_t)layer * n_head_ + head]; }
  // The same selection on a GPU; none with an adaptive budget (tip_mass), which runs on the CPU only.
  std::optional<DeviceSelection> device_selection(int n_layer) const override;
  // The query heads of one KV head: forced rows, then each head's top rows from a single TIP pass
  // over the K_dom plane.
  void pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
            std::vector<int32_t>* rows) override;

 protected:
  KeyLayout sparse_key_layout(int layer, int kv_head) const override {
    return layouts_[(size_t)layer * n_head_kv_ + kv_head];
  }

 private:
  int sink_, recent_;  // (the budget and the dense layers are the base's)
  double mass_;
  FcRank rank_;
  int n_head_, n_head_kv_;
  float scale_;  // attention's scale (1/sqrt(head_dim) by default): TIP's scores as logits for the adaptive budget
  std::vector<KeyLayout> layouts_;        // [n_layer * n_head_kv]
  std::vector<std::vector<int>> dims_;    // [n_layer * n_head]
  std::vector<ChunkSetting> settings_;    // each sparse layer's ranking and chunk count
  bool profile_chose_ = false;            // the profile holds a chunk choice
};

// TIP over rows lo..hi-1 of kv's K_dom plane for n_q queries reduced to it (q_dom: [n_q, n_dom]), its
// bytes counted; appends each query's top `want` rows to rows[i]. FASA's and DoubleSparse's scoring pass.
// With 0 < mass < 1 (Twilight's top-p: an adaptive budget), only the fewest of those top rows whose
// softmax weights — TIP's scores times `scale` (attention's), normalised over all rows lo..hi-1 — sum to
// at least `mass`.
void tip_top_rows(const float* q_dom, int n_q, const KvHeadView& kv, int64_t lo, int64_t hi, int64_t want,
                  std::vector<int32_t>* rows, double mass = 0, float scale = 1);

class AutoProfileStore;
// The profile a calibrated policy (FASA, DoubleSparse) scores with: the options' file, the automatic
// one of `autos` (throws fasa::Error while there is none), or without either the bench's synthetic stand-in.
Profile policy_profile(const PolicyOptions& opts, const Model& model, const AutoProfileStore* autos);

// FASA with `profile` and the rest of `opts` (budget, chunks, sharing, dense layers, sink, recent).
std::unique_ptr<FasaPolicy> make_fasa_policy_from(const Profile& profile, const PolicyOptions& opts, const Model& model);
// The frequency chunks per head FASA scores on with these options: --fcs, else 0 where each layer
// takes the count its profile chose (--fc-rank auto with a profile that has a choice, or the automatic
// profile), else the profile's n_tip (a synthetic profile's: calibration's default); 0 for other
// policies. For the records of a run ("fcs=chosen").
int fasa_chunks(const PolicyOptions& opts, const Model& model);
// The forced rows FASA runs with under `o`: its settings, or FasaOptions' defaults where they are -1.
int fasa_sink(const PolicyOptions& o);
int fasa_recent(const PolicyOptions& o);

}  // namespace fasa
