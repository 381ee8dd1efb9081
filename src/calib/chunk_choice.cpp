#include "calib/chunk_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "calib/agreement.h"
#include "fasa/error.h"
#include "ops/topk.h"

namespace fasa {

namespace {

struct MeasuredQuery {
  int64_t pos;
  bool copy;  // in a probe's copies (else running text)
};

// The positions p0..p0+n-1 whose queries are measured: past the first copied tokens of each copy, and
// every kTextStride-th of the running text, where there are enough distant keys to choose from.
std::vector<MeasuredQuery> measured_queries(int64_t p0, int n, const RecallSettings& s, int64_t copies_from,
                                            int64_t span) {
  std::vector<MeasuredQuery> measured;
  for (int64_t pos = p0; pos < p0 + n; ++pos) {
    if (pos + 1 - s.window < 2 * s.pick) continue;  // too few distant keys to choose from
    const bool copy = pos >= copies_from;
    if (copy ? (pos - copies_from) % span >= RecallMeter::kCopyLead : pos % RecallMeter::kTextStride == 0)
      measured.push_back({pos, copy});
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

// How many of a candidate's top `pick` distant keys, scored on its chunks alone, are in full
// attention's top ones (mask).   partial: [F, T] each chunk's scores; cand, idx: scratch
int candidate_hits(const std::vector<int>& chunks, const std::vector<float>& partial, int64_t T, int64_t n_far, int pick,
                   const std::vector<char>& mask, std::vector<float>& cand, std::vector<int32_t>& idx) {
  cand.assign(n_far, 0.0f);
  for (int f : chunks) {
    const float* p = &partial[(size_t)f * T];
    for (int64_t j = 0; j < n_far; ++j) cand[j] += p[j];
  }
  top_k_indices(cand.data(), n_far, pick, idx);
  int hits = 0;
  for (int r = 0; r < pick; ++r) hits += mask[idx[r]];
  return hits;
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
    : c_(c), cands_(std::move(candidates)), s_(s), sum_((size_t)c.n_layer * cands_.size() * 2, 0.0),
      weight_((size_t)c.n_layer * 2, 0.0) {
  if (s.top_k < 1 || s.pick < s.top_k) throw Error("chunk choice: needs 1 <= top_k <= pick");
  const int group = c.n_head / c.n_head_kv;
  for (int l = 0; l < c.n_layer; ++l)
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh)
      for (const ChunkSetting& cand : cands_)
        fcs_.push_back(p.dominant_fcs(l, kvh * group, cand.n_fc, FcSharing::Group, cand.rank));
}

void RecallMeter::on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) {
  const int D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, group = H / HKV, C = (int)cands_.size();
  const FcLayout fcs(c_);
  const int F = fcs.n_fc();
  const std::vector<MeasuredQuery> measured = measured_queries(p0, n, s_, copies_from_, span_);
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
    std::vector<double> sum((size_t)C * 2, 0.0);
    double weight[2] = {0, 0};
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
        top_k_mask(full.data(), n_far, s_.top_k, top, mask);
        for (int c = 0; c < C; ++c) {
          const int hits = candidate_hits(fcs_[((size_t)layer * HKV + kv_head) * C + c], partial, T, n_far, s_.pick,
                                          mask, cand, idx);
          sum[(size_t)c * 2 + !m.copy] += w * hits / s_.top_k;
        }
        weight[!m.copy] += w;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < sum.size(); ++i) sum_[(size_t)layer * C * 2 + i] += sum[i];
    for (int k = 0; k < 2; ++k) weight_[(size_t)layer * 2 + k] += weight[k];
  }
}

std::vector<std::vector<CandidateRecall>> RecallMeter::recalls() const {
  const int C = (int)cands_.size();
  std::vector<std::vector<CandidateRecall>> out(c_.n_layer);
  for (int l = 0; l < c_.n_layer; ++l) {
    const double copies = weight_[(size_t)l * 2], text = weight_[(size_t)l * 2 + 1];
    if (copies <= 0) continue;
    for (int c = 0; c < C; ++c)
      out[l].push_back({cands_[c], sum_[((size_t)l * C + c) * 2] / copies,
                        text ? sum_[((size_t)l * C + c) * 2 + 1] / text : 0.0});
  }
  return out;
}

std::vector<ProbeWindow> probe_windows(const std::vector<std::vector<int32_t>>& windows, const RecallSettings& s) {
  constexpr int kCopies = 4;
  std::vector<ProbeWindow> out;
  for (const auto& w : windows) {
    const int64_t L = (int64_t)w.size(), span = std::clamp<int64_t>(L / 32, 8, 64);
    const int64_t text = L - kCopies * span, half = text / 2;
    // The copies' originals lie in the first half; every copy must be far from its original.
    if (half - span - 1 < kCopies || text - half < s.window + 2 * s.pick) continue;
    ProbeWindow p;
    p.tokens.assign(w.begin(), w.begin() + text);
    p.copies_from = text;
    p.span = span;
    for (int i = 0; i < kCopies; ++i) {
      const int64_t from = 1 + i * (half - span - 1) / kCopies;  // (after a BOS)
      p.tokens.insert(p.tokens.end(), w.begin() + from, w.begin() + from + span);
    }
    out.push_back(std::move(p));
  }
  return out;
}

ChunkChoice decide_chunks(std::vector<std::vector<CandidateRecall>> measured, const RecallSettings& s) {
  ChunkChoice choice;
  choice.settings = s;
  for (const auto& layer : measured) {
    const CandidateRecall* best = nullptr;  // the highest recall on copies, fewest chunks first
    for (const CandidateRecall& c : layer)
      if (!best || c.copies > best->copies) best = &c;
    // The fewest chunks reaching the target (else the best there is); at one count, the better ranking.
    const CandidateRecall* pick = nullptr;
    for (const CandidateRecall& c : layer)
      if ((c.copies >= s.target || &c == best) &&
          (!pick || (c.setting.n_fc == pick->setting.n_fc && c.copies > pick->copies)))
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
    meter.start_window(w.copies_from, w.span);
    session.prefill(w.tokens);
  }
  return decide_chunks(meter.recalls(), s);
}

std::string describe_choice(const ChunkChoice& c) {
  std::string out;
  char line[160];
  for (int l = 0; l < (int)c.layers.size(); ++l)
    if (const CandidateRecall* r = c.chosen(l)) {
      std::snprintf(line, sizeof line, "layer %d: %d chunks by %s, recall %.2f on copied spans, %.2f on text\n", l,
                    r->setting.n_fc, name_of(r->setting.rank), r->copies, r->text);
      out += line;
    }
  return out;
}

std::string choice_warning(const Profile& p) {
  if (!p.choice)
    return "warning: no far-recall check (the calibration text needs windows of about 600 tokens or more): FASA "
           "ranks chunks by agreement, which can miss distant tokens. Fix: calibrate on a longer text";
  std::string low;
  for (int l = 0; l < (int)p.choice->layers.size(); ++l)
    if (const CandidateRecall* r = p.choice->chosen(l); r && r->copies < p.choice->settings.target)
      low += (low.empty() ? "" : ", ") + std::to_string(l) + " (" + std::to_string((int)std::lround(100 * r->copies)) + "%)";
  if (low.empty()) return "";
  return "warning: in layers " + low + " no candidate keeps " +
         std::to_string((int)std::lround(100 * p.choice->settings.target)) +
         "% of full attention's top distant keys: FASA may miss distant facts there. Fix: --fcs " +
         std::to_string(p.n_fc * 3 / 4) + " (more chunks), keep those layers dense (--dense-layers), or calibrate "
         "on a longer, more varied text";
}

}  // namespace fasa
