#pragma once
// A FASA profile: the calibration result for one model — mean contextual agreement of every
// (layer, query head, frequency chunk) and the dominant chunks chosen from it. Stored as JSON and
// tied to the model by a fingerprint (shapes, RoPE layout and a hash of sampled weight bytes).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fasa/options.h"
#include "model/model.h"

namespace fasa {

struct ModelFingerprint {
  std::string arch;
  int n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0, n_vocab = 0;
  std::string rope_layout;
  std::string weights_hash;  // 16 hex digits
  bool operator==(const ModelFingerprint&) const = default;
};

ModelFingerprint fingerprint(const Model& m);

// One way to pick a head's chunks: a ranking and a count.
struct ChunkSetting {
  FcRank rank = FcRank::Agreement;
  int n_fc = 0;
  bool operator==(const ChunkSetting&) const = default;
};

// How the chunk choice measures recall (calib/chunk_choice.h).
struct RecallSettings {
  int64_t window = 128;  // keys this close to the query are recent: not measured
  int top_k = 1;         // full attention's top keys among the distant ones...
  int pick = 64;         // ... looked for among a candidate's top `pick` on its chunks alone
  double target = 0.9;   // the far recall (CandidateRecall::far) a layer's choice must reach
  bool operator==(const RecallSettings&) const = default;
};

// A candidate's mean recall of full attention's top distant keys: on the probes' copied spans (far
// retrieval), on their running text, and on copied records among look-alike records (the share where
// the candidate ranks full attention's key above the same place in every look-alike record).
struct CandidateRecall {
  ChunkSetting setting;
  double copies = 0, text = 0;
  double lookalikes = -1;  // -1: not measured (profiles made before look-alike probes)
  // What the choice must keep: far retrieval, among look-alikes too where measured.
  double far() const { return lookalikes < 0 ? copies : std::min(copies, lookalikes); }
};

// What calibration chose for FASA's defaults, per layer, and what it measured to choose.
struct ChunkChoice {
  RecallSettings settings;
  std::vector<ChunkSetting> layers;                    // [n_layer]; n_fc 0: not measured (sliding layers)
  std::vector<std::vector<CandidateRecall>> measured;  // [n_layer][candidates]
  // The chosen setting's recall in `layer` (nullptr for a layer not measured).
  const CandidateRecall* chosen(int layer) const;
};


struct Profile {
  static constexpr int kVersion = 1;
  ModelFingerprint model;
  std::string calibration_text;  // file name, for the record
  int64_t calibration_tokens = 0;
  int64_t queries = 0;           // queries per (layer, head) behind each mean
  int top_k = 0;                 // K of CA_K
  int64_t min_pos = 0;
  int n_tip = 0;                 // chunks kept per head by default
  int n_fc = 0;
  std::vector<float> mean_ca;    // [n_layer, n_head, n_fc]
  // DoubleSparse's channel statistic (AgreementMeter::channel_qk); empty in profiles made before it
  std::vector<float> channel_qk;  // [n_layer, n_head, head_dim]
  // FASA's default ranking and chunk count per layer; absent in profiles made before it
  std::optional<ChunkChoice> choice;

  float ca(int layer, int head, int fc) const {
    return mean_ca[((size_t)layer * model.n_head + head) * n_fc + fc];
  }
  // Every chunk's score [n_fc] for (layer, query head): its mean CA (Agreement) or its magnitude, the
  // channel statistic summed over the chunk's two dims (mean |q_c| times mean |k_c|, DoubleSparse's);
  // Auto: the ranking `setting` gives the layer.
  // With Group sharing, the mean over the query heads that share the head's KV head. Magnitude throws
  // fasa::Error when the profile has no channel statistics (made before DoubleSparse).
  std::vector<double> chunk_scores(int layer, int head, FcSharing sharing, FcRank rank) const;
  // The n chunks of highest score for (layer, query head), best first.
  std::vector<int> dominant_fcs(int layer, int head, int n, FcSharing sharing, FcRank rank) const;
  // What FASA uses in `layer` when asked for `rank` and `n` chunks: Auto takes the profile's choice
  // (agreement where it has none); n = 0 the choice's count with Auto, else n_tip.
  ChunkSetting setting(int layer, FcRank rank, int n) const;
};

// Chunks per (layer, query head) [n_layer * n_head] for `n_avg` per head on average over the
// layers marked sparse (others 0), so that TIP reads as many bytes as n_avg everywhere would: each
// head (each GQA group with Group sharing, which shares one count) gets the fewest chunks that hold a
// share tau of its total score (`rank`'s), tau the largest the total allows; what remains goes one
// chunk at a time to the heads whose next chunk holds the largest share. Heads whose score concentrates
// in a few chunks get fewer, flat ones more (--fc-alloc adaptive).
std::vector<int> adaptive_chunk_counts(const Profile& p, int n_avg, FcSharing sharing, FcRank rank,
                                      const std::vector<char>& sparse_layer);

void save_profile(const Profile& p, const std::string& path);
// Throws fasa::Error naming the file on malformed content.
Profile load_profile(const std::string& path);
// Chunks per head a profile keeps when none are asked for: a quarter of the rotary ones (n_rot / 8),
// at least 1. Calibration and synthetic profiles both use it.
int default_n_tip(const ModelConfig& c);
// Seeded random mean CA for every (layer, head, chunk): dominant chunks without calibration, for speed
// measurements only (the selection is meaningless for quality).
Profile synthetic_profile(const Model& m, int n_tip, uint64_t seed);
// Throws fasa::Error when the profile was made for another model.
void check_profile_matches(const Profile& p, const Model& m, const std::string& path);

}  // namespace fasa
