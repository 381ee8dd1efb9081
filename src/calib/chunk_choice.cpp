#include "calib/chunk_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "calib/agreement.h"
#include "fasa/error.h"
#include "ops/topk.h"

namespace fasa {

namespace {

// What a measured query probes; also its slot in RecallMeter's sums.
enum ProbeKind { kCopies = 0, kText = 1, kLookalikes = 2, kProbeKinds = 3 };

struct MeasuredQuery {
  int64_t pos;
  ProbeKind kind;
};

// The positions p0..p0+n-1 whose queries are measured, where there are enough distant keys to choose
// from: every kTextStride-th of the running text, a copy's past its first tokens, and a copied
// record's from its key's last token to its value's second last (those that predict the value).
std::vector<MeasuredQuery> measured_queries(int64_t p0, int n, const RecallSettings& s, const ProbeWindow& w) {
  using W = ProbeWindow;
  std::vector<MeasuredQuery> measured;
  for (int64_t pos = p0; pos < p0 + n; ++pos) {
    if (pos + 1 - s.window < 2 * s.pick) continue;  // too few distant keys to choose from
    if (pos >= w.records_copied_from) {
      const int64_t at = (pos - w.records_copied_from) % W::kRecordLen;
      if (at >= W::kTemplate + W::kKey - 1 && at <= W::kRecordLen - 2) measured.push_back({pos, kLookalikes});
    } else if (pos >= w.copies_from) {
      if ((pos - w.copies_from) % w.span >= RecallMeter::kCopyLead) measured.push_back({pos, kCopies});
    } else if (pos % RecallMeter::kTextStride == 0) {
      measured.push_back({pos, kText});
    }
  }
  return measured;
}

// The weight of a (query, head): its attention's share on the distant keys (the first n_far of T).
// full: [T] its full scores
double far_share(const std::vector<float>& full, int64_t T, int64_t n_far, float scale) {
  const float top_score = *std::max_element(full.begin(), full.end());
  double far = 0, all = 0;
  for (int64_t j = 0; j < T; ++j) {
    const double e = std::exp((double)(full[j] - top_score) * scale);
    all += e;
    if (j < n_far) far += e;
  }
  return far / all;
}

// A candidate's scores of the distant keys on its chunks alone.   partial: [F, T]; cand: [n_far]
void candidate_scores(const std::vector<int>& chunks, const std::vector<float>& partial, int64_t T, int64_t n_far,
                      std::vector<float>& cand) {
  cand.assign(n_far, 0.0f);
  for (int f : chunks) {
    const float* p = &partial[(size_t)f * T];
    for (int64_t j = 0; j < n_far; ++j) cand[j] += p[j];
  }
}

// How many of the candidate's top `pick` keys (cand) are in full attention's top ones (mask).
int candidate_hits(const std::vector<float>& cand, int pick, const std::vector<char>& mask, std::vector<int32_t>& idx) {
  top_k_indices(cand.data(), (int64_t)cand.size(), pick, idx);
  int hits = 0;
  for (int r = 0; r < pick; ++r) hits += mask[idx[r]];
  return hits;
}

// The look-alike record holding key `j` (its index in w.record_at), or -1.
int record_of(const ProbeWindow& w, int64_t j) {
  const auto after = std::upper_bound(w.record_at.begin(), w.record_at.end(), j);
  if (after == w.record_at.begin() || j - after[-1] >= ProbeWindow::kRecordLen) return -1;
  return (int)(after - w.record_at.begin()) - 1;
}

// Whether the candidate (cand) ranks key `j`, in record r, above the same place in every other record.
bool tells_apart(const std::vector<float>& cand, const ProbeWindow& w, int r, int64_t j) {
  for (int o = 0; o < (int)w.record_at.size(); ++o)
    if (o != r && cand[w.record_at[o] + j - w.record_at[r]] >= cand[j]) return false;
  return true;
}

}  // namespace

std::vector<ChunkSetting> chunk_candidates(int n_fc, int n_only) {
  std::vector<ChunkSetting> out;
  for (int n : {n_fc / 4, n_fc / 2}) {
    n = n_only > 0 ? n_only : std::max(1, n);
    for (FcRank r : {FcRank::Agreement, FcRank::Magnitude})
      if (std::find(out.begin(), out.end(), ChunkSetting{r, n}) == out.end()) out.push_back({r, n});
  }
  return out;
}

RecallMeter::RecallMeter(const Profile& p, const ModelConfig& c, std::vector<ChunkSetting> candidates,
                         RecallSettings s)
    : c_(c), cands_(std::move(candidates)), s_(s), sum_((size_t)c.n_layer * cands_.size() * kProbeKinds, 0.0),
      weight_((size_t)c.n_layer * kProbeKinds, 0.0) {
  if (s.top_k < 1 || s.pick < s.top_k) throw Error("chunk choice: needs 1 <= top_k <= pick");
  const int group = c.n_head / c.n_head_kv;
  for (int l = 0; l < c.n_layer; ++l)
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh)
      for (const ChunkSetting& cand : cands_)
        fcs_.push_back(p.dominant_fcs(l, kvh * group, cand.n_fc, FcSharing::Group, cand.rank));
}

void RecallMeter::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  if (!w_) throw Error("chunk choice: the recall meter runs without a probe window");
  const int D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, group = H / HKV, C = (int)cands_.size();
  const FcLayout fcs(c_);
  const int F = fcs.n_fc();
  const std::vector<MeasuredQuery> measured = measured_queries(p0, n, s_, *w_);
  if (measured.empty()) return;
  const int64_t n_rows = measured.back().pos + 1;
  std::vector<float> first, second;  // [HKV, F, n_rows] each
  unpack_chunk_keys(cache, layer, n_rows, fcs, first, second);
  const int n_pairs = (int)measured.size() * HKV;
  const float scale = c_.attention_scale();
#pragma omp parallel
  {
    std::vector<float> partial, full, cand;  // [F, T], [T], [n_far]
    std::vector<int32_t> top, idx;
    std::vector<char> mask;
    std::vector<double> sum((size_t)C * kProbeKinds, 0.0), weight(kProbeKinds, 0.0);
#pragma omp for schedule(dynamic)
    for (int i = 0; i < n_pairs; ++i) {
      const MeasuredQuery& m = measured[i / HKV];
      const int kv_head = i % HKV;
      const int64_t T = m.pos + 1, n_far = T - s_.window;
      for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const float* qh = q + ((size_t)(m.pos - p0) * H + h) * D;
        chunk_scores(qh, fcs, &first[(size_t)kv_head * F * n_rows], &second[(size_t)kv_head * F * n_rows], n_rows, T,
                     partial, full);
        const double w = far_share(full, T, n_far, scale);
        int record = -1;
        int64_t best = 0;
        if (m.kind == kLookalikes) {
          best = std::max_element(full.begin(), full.begin() + n_far) - full.begin();
          if ((record = record_of(*w_, best)) < 0) continue;  // full attention looks elsewhere: nothing to tell apart
        } else {
          top_k_mask(full.data(), n_far, s_.top_k, top, mask);
        }
        for (int c = 0; c < C; ++c) {
          candidate_scores(fcs_[((size_t)layer * HKV + kv_head) * C + c], partial, T, n_far, cand);
          const double hit = m.kind == kLookalikes ? tells_apart(cand, *w_, record, best)
                                                   : (double)candidate_hits(cand, s_.pick, mask, idx) / s_.top_k;
          sum[(size_t)c * kProbeKinds + m.kind] += w * hit;
        }
        weight[m.kind] += w;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < sum.size(); ++i) sum_[(size_t)layer * C * kProbeKinds + i] += sum[i];
    for (int k = 0; k < kProbeKinds; ++k) weight_[(size_t)layer * kProbeKinds + k] += weight[k];
  }
}

std::vector<std::vector<CandidateRecall>> RecallMeter::recalls() const {
  const int C = (int)cands_.size();
  std::vector<std::vector<CandidateRecall>> out(c_.n_layer);
  for (int l = 0; l < c_.n_layer; ++l) {
    const double* weight = &weight_[(size_t)l * kProbeKinds];
    if (weight[kCopies] <= 0) continue;
    for (int c = 0; c < C; ++c) {
      const double* sum = &sum_[((size_t)l * C + c) * kProbeKinds];
      out[l].push_back({cands_[c], sum[kCopies] / weight[kCopies], weight[kText] ? sum[kText] / weight[kText] : 0.0,
                        weight[kLookalikes] ? sum[kLookalikes] / weight[kLookalikes] : -1.0});
    }
  }
  return out;
}

namespace {

// `n` records of one template (kTemplate tokens of the text), each with its own key and value
// (tokens drawn from the text; no two keys alike), or none where the text has too few distinct tokens.
//   text: [>= 2]; returns [n, kRecordLen] or []
std::vector<std::vector<int32_t>> lookalike_records(std::span<const int32_t> text, int n, uint64_t seed) {
  using W = ProbeWindow;
  std::mt19937_64 rng(seed);
  auto draw = [&] { return text[1 + rng() % (text.size() - 1)]; };  // (never the BOS at 0)
  const size_t t = 1 + rng() % (text.size() - W::kTemplate);
  std::vector<std::vector<int32_t>> out;
  for (int tries = 0; (int)out.size() < n && tries < 64 * n; ++tries) {
    std::vector<int32_t> r(text.begin() + t, text.begin() + t + W::kTemplate);
    for (int i = 0; i < W::kKey + W::kValue; ++i) r.push_back(draw());
    auto same_key = [&](const std::vector<int32_t>& o) {
      return std::equal(o.begin() + W::kTemplate, o.begin() + W::kTemplate + W::kKey, r.begin() + W::kTemplate);
    };
    if (std::none_of(out.begin(), out.end(), same_key)) out.push_back(std::move(r));
  }
  if ((int)out.size() < n) return {};  // too few distinct tokens to key them (a text of one repeated word)
  return out;
}

}  // namespace

std::vector<ProbeWindow> probe_windows(const std::vector<std::vector<int32_t>>& windows, const RecallSettings& s) {
  using W = ProbeWindow;
  constexpr int kCopies = 4;
  std::vector<ProbeWindow> out;
  for (const auto& w : windows) {
    const int64_t L = (int64_t)w.size(), span = std::clamp<int64_t>(L / 32, 8, 64);
    const int64_t text = L - kCopies * span - W::kRecordCopies * W::kRecordLen, half = text / 2;
    // The copies' originals lie in the first half, the records in the second (over its text, the last
    // `window` tokens left free), and every copy far from its original.
    const int64_t gap = (text - half - s.window) / W::kRecords;  // a record every `gap` tokens
    if (half - span - 1 < kCopies || text - half < s.window + 2 * s.pick || gap < W::kRecordLen) continue;
    ProbeWindow p;
    p.span = span;
    p.tokens.assign(w.begin(), w.begin() + text);
    const auto records = lookalike_records(std::span(w.data(), (size_t)text), W::kRecords, 0x5eed + out.size());
    for (size_t r = 0; r < records.size(); ++r) {
      p.record_at.push_back(half + (int64_t)r * gap);
      std::copy(records[r].begin(), records[r].end(), p.tokens.begin() + p.record_at.back());
    }
    p.copies_from = text;
    for (int i = 0; i < kCopies; ++i) {
      const int64_t from = 1 + i * (half - span - 1) / kCopies;  // (after a BOS)
      p.tokens.insert(p.tokens.end(), w.begin() + from, w.begin() + from + span);
    }
    p.records_copied_from = (int64_t)p.tokens.size();
    for (int i = 0; i < W::kRecordCopies && !records.empty(); ++i) {
      const auto& r = records[1 + i * W::kRecords / W::kRecordCopies];
      p.tokens.insert(p.tokens.end(), r.begin(), r.end());
    }
    out.push_back(std::move(p));
  }
  return out;
}

ChunkChoice decide_chunks(std::vector<std::vector<CandidateRecall>> measured, const RecallSettings& s) {
  ChunkChoice choice;
  choice.settings = s;
  for (const auto& layer : measured) {
    const CandidateRecall* best = nullptr;  // the highest far recall, fewest chunks first
    for (const CandidateRecall& c : layer)
      if (!best || c.far() > best->far()) best = &c;
    // The fewest chunks reaching the target (else the best there is); at one count, the better ranking.
    const CandidateRecall* pick = nullptr;
    for (const CandidateRecall& c : layer)
      if ((c.far() >= s.target || &c == best) &&
          (!pick || (c.setting.n_fc == pick->setting.n_fc && c.far() > pick->far())))
        pick = &c;
    choice.layers.push_back(pick ? pick->setting : ChunkSetting{FcRank::Agreement, 0});
  }
  choice.measured = std::move(measured);
  return choice;
}

std::optional<ChunkChoice> choose_chunks(const Model& m, const Profile& p,
                                         const std::vector<std::vector<int32_t>>& windows, int n,
                                         const RecallSettings& s) {
  const std::vector<ProbeWindow> probes = probe_windows(windows, s);
  if (probes.empty()) return std::nullopt;
  RecallMeter meter(p, m.config, chunk_candidates(p.n_fc, n), s);
  SessionOptions so;
  for (const ProbeWindow& w : probes) so.n_ctx = std::max<int64_t>(so.n_ctx, (int64_t)w.tokens.size());
  for (const ProbeWindow& w : probes) {
    Session session(m, so);
    session.set_observer(&meter);
    meter.start_window(w);
    session.prefill(w.tokens);
  }
  return decide_chunks(meter.recalls(), s);
}

std::string describe_choice(const ChunkChoice& c) {
  std::string out;
  char line[192], lookalikes[48];
  for (int l = 0; l < (int)c.layers.size(); ++l)
    if (const CandidateRecall* r = c.chosen(l)) {
      if (r->lookalikes < 0)  // full attention's top distant key lay in no record
        std::snprintf(lookalikes, sizeof lookalikes, "look-alikes not measured");
      else
        std::snprintf(lookalikes, sizeof lookalikes, "%.2f among look-alikes", r->lookalikes);
      std::snprintf(line, sizeof line, "layer %d: %d chunks by %s, recall %.2f on copied spans, %s, %.2f on text\n", l,
                    r->setting.n_fc, name_of(r->setting.rank), r->copies, lookalikes, r->text);
      out += line;
    }
  return out;
}

std::string choice_warning(const Profile& p) {
  if (!p.choice)
    return "warning: no far-recall check (the calibration text needs windows of about 700 tokens or more): FASA "
           "ranks chunks by agreement, which can miss distant tokens. Fix: calibrate on a longer text";
  std::string low;
  for (int l = 0; l < (int)p.choice->layers.size(); ++l)
    if (const CandidateRecall* r = p.choice->chosen(l); r && r->far() < p.choice->settings.target)
      low += (low.empty() ? "" : ", ") + std::to_string(l) + " (" + std::to_string((int)std::lround(100 * r->far())) + "%)";
  if (low.empty()) return "";
  return "warning: in layers " + low + " no candidate keeps " +
         std::to_string((int)std::lround(100 * p.choice->settings.target)) +
         "% of full attention's top distant keys: FASA may miss distant facts there. Fix: --fcs " +
         std::to_string(p.n_fc * 3 / 4) + " (more chunks), keep those layers dense (--dense-layers), or calibrate "
         "on a longer, more varied text";
}

}  // namespace fasa
