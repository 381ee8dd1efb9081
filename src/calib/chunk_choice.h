#pragma once
// FASA's default chunks, chosen per layer from what decoding needs (docs/FASA.md §2, "Chunk choice").
// Agreement on running text, where most attention is local, can favour chunks that only score nearby
// tokens; decoding must also find far ones. So after the agreement pass, a dense run over *probe
// windows* measures every candidate (ranking × chunk count) where full attention looks far back:
// - copies: spans of the window's first half copied again at its end; recall is the share of full
//   attention's top `top_k` keys among the distant ones (older than `window` tokens) that the
//   candidate's top `pick` on its chunks alone contains;
// - look-alikes: records made of one shared template, a key and a value (tokens of the text), many in
//   the window and some copied at its end; recall is the share of the copies' value queries where the
//   candidate ranks full attention's top distant key above the same place in every other record. Prose
//   has no near-duplicates, so copies alone cannot see what a list of similar records (a multi-key
//   haystack) asks of the chunks: to tell one record from the others.
// Each layer keeps the fewest chunks whose recall on both reaches `target`, by the ranking that scores
// best there (agreement on a tie).
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calib/profile.h"
#include "model/session.h"

namespace fasa {

// Candidates: both rankings at a quarter (the paper's default count) and half of the chunks (at least
// one each), or at `n` chunks only when n > 0. Never fewer than the default: fewer bytes lose text
// quality the far-recall check does not see.
std::vector<ChunkSetting> chunk_candidates(int n_fc, int n = 0);

// Probe windows of `windows` (token windows of the calibration text): running text whose second half
// holds kRecords look-alike records (written over it), then 4 spans of `span` tokens copied from its
// first half (from `copies_from`), then kRecordCopies of the records copied (from
// `records_copied_from`); as long as the window. Windows too short to hold copies far from their
// originals (about 700 tokens) are left out.
struct ProbeWindow {
  static constexpr int kRecords = 16, kRecordCopies = 8;
  static constexpr int kTemplate = 3, kKey = 2, kValue = 4, kRecordLen = kTemplate + kKey + kValue;
  std::vector<int32_t> tokens;
  int64_t copies_from = 0, span = 0;
  // [kRecords] each look-alike record's first position, ascending; [] (and no record copies) where the
  // text has too few distinct tokens to key 16 records: look-alikes are then not measured
  std::vector<int64_t> record_at;
  int64_t records_copied_from = 0;
};
std::vector<ProbeWindow> probe_windows(const std::vector<std::vector<int32_t>>& windows, const RecallSettings& s);

// Measures each candidate's recall in every layer the observer sees, with group sharing (the
// default: one chunk set per KV head).
class RecallMeter : public AttentionObserver {
 public:
  RecallMeter(const Profile& p, const ModelConfig& c, std::vector<ChunkSetting> candidates, RecallSettings s);
  // The probe window whose tokens the next prefill runs (kept by reference until then).
  void start_window(const ProbeWindow& w) { w_ = &w; }
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override;
  // Mean recalls per layer, in the candidates' order (layers never observed: empty).
  std::vector<std::vector<CandidateRecall>> recalls() const;

  static constexpr int kTextStride = 8;
  static constexpr int kCopyLead = 2;  // a copy's first tokens cannot know yet what they copy: skipped

 private:
  const ModelConfig& c_;
  std::vector<ChunkSetting> cands_;
  RecallSettings s_;
  std::vector<std::vector<int>> fcs_;  // [n_layer * n_head_kv * n_cand] each candidate's chunks
  const ProbeWindow* w_ = nullptr;
  std::mutex mu_;
  std::vector<double> sum_;     // [n_layer, n_cand, 3] weighted recall sums per ProbeKind
  std::vector<double> weight_;  // [n_layer, 3] the weights' sums
};

// Each layer's choice from what was measured there (settings.target).
ChunkChoice decide_chunks(std::vector<std::vector<CandidateRecall>> measured, const RecallSettings& s);

// Measures the candidates (at n chunks when n > 0) on probe windows made from `windows` and returns the choice (nullopt when no
// window is long enough).
std::optional<ChunkChoice> choose_chunks(const Model& m, const Profile& p,
                                         const std::vector<std::vector<int32_t>>& windows, int n = 0,
                                         const RecallSettings& s = {});

// The self-check people see after calibrating: a line per measured layer (its choice and recall), e.g.
// "layer 1: 8 chunks by magnitude, recall 0.94 on copied spans, 0.97 on text".
std::string describe_choice(const ChunkChoice& c);
// A warning with the fix when a layer's choice stays under the target, or when the profile has no
// choice; "" when every layer reached it.
std::string choice_warning(const Profile& p);

}  // namespace fasa
