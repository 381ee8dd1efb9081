#include "sparse/fasa.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

#include "calib/auto_profile.h"
#include "calib/fc_layout.h"
#include "model/model.h"
#include "ops/kv_rows.h"
#include "ops/kv_traffic.h"
#include "ops/topk.h"
#include "fasa/error.h"

namespace fasa {

FasaPolicy::FasaPolicy(const Profile& profile, const ModelConfig& c, const FasaOptions& opts)
    : SparsePolicy(opts.budget, opts.dense_layers, c.n_layer), sink_(opts.sink), recent_(opts.recent),
      mass_(opts.mass), rank_(opts.rank), n_head_(c.n_head), n_head_kv_(c.n_head_kv), scale_(c.attention_scale()) {
  const FcLayout fcs(c);
  const int n_tip = opts.n_tip > 0 ? opts.n_tip : profile.n_tip;
  if (n_tip > fcs.n_fc())
    throw Error("fcs: " + std::to_string(n_tip) + " exceeds the " + std::to_string(fcs.n_fc()) + " chunks per head");
  if (opts.sink < 0 || opts.recent < 0) throw Error("sink and recent must be >= 0");
  if (!(opts.mass >= 0 && opts.mass <= 1)) throw Error("tip_mass: must lie in 0..1 (0: the whole budget)");
  const int group = c.n_head / c.n_head_kv;
  std::vector<int> counts;  // [n_layer * n_head] chunks per query head; empty: each layer's setting
  if (opts.adaptive) {
    std::vector<char> sparse_layer(c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) sparse_layer[l] = !is_dense_layer(l) && !c.sliding(l);  // FASA's layers
    counts = adaptive_chunk_counts(profile, n_tip, opts.sharing, opts.rank, sparse_layer);
  }
  profile_chose_ = profile.choice.has_value();
  dims_.resize((size_t)c.n_layer * c.n_head);
  for (int l = 0; l < c.n_layer; ++l)
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
      KeyLayout layout;
      if (is_dense_layer(l) || c.sliding(l)) {  // (a sliding layer never reaches the policy)
        layouts_.push_back(layout);
        continue;
      }
      // K_dom = the union of the chunks the group's query heads score on (one set with group sharing).
      const ChunkSetting setting = profile.setting(l, opts.rank, opts.n_tip);
      if (kvh == 0) settings_.push_back(setting);
      std::vector<std::vector<int>> head_fcs;
      std::set<int> union_fcs;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int n = counts.empty() ? setting.n_fc : counts[(size_t)l * c.n_head + h];
        head_fcs.push_back(profile.dominant_fcs(l, h, n, opts.sharing, setting.rank));
        union_fcs.insert(head_fcs.back().begin(), head_fcs.back().end());
      }
      std::vector<int> pos_of_fc(fcs.n_fc(), -1);  // chunk -> its first slot in K_dom
      for (int f : union_fcs) {
        pos_of_fc[f] = (int)layout.perm.size();
        for (int d : fcs.dims(f)) layout.perm.push_back(d);
      }
      layout.n_dom = (int)layout.perm.size();
      std::vector<char> used(c.head_dim, 0);
      for (int d : layout.perm) used[d] = 1;
      for (int d = 0; d < c.head_dim; ++d)
        if (!used[d]) layout.perm.push_back(d);
      for (int g = 0; g < group; ++g) {
        const size_t idx = (size_t)l * c.n_head + kvh * group + g;
        for (int f : head_fcs[g]) {
          dims_[idx].push_back(pos_of_fc[f]);
          dims_[idx].push_back(pos_of_fc[f] + 1);
        }
        std::sort(dims_[idx].begin(), dims_[idx].end());
      }
      layouts_.push_back(std::move(layout));
    }
}

std::string FasaPolicy::summary() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, ", TIP reads K_dom = %.1f%% of key dims in sparse layers", 100 * kdom_share());
  // The sparse layers' chunk settings, e.g. "8 chunks by magnitude" or "4-8 chunks by agreement (2 layers), magnitude (3)"
  int lo = 1 << 30, hi = 0, by[3] = {0, 0, 0};
  for (const ChunkSetting& s : settings_) {
    lo = std::min(lo, s.n_fc);
    hi = std::max(hi, s.n_fc);
    by[(int)s.rank]++;
  }
  // (appended piece by piece: GCC 12 warns, wrongly, on "-" + std::to_string(n) here)
  std::string chunks;
  if (!settings_.empty()) chunks.append(", ").append(std::to_string(lo));
  if (hi > lo) chunks.append("-").append(std::to_string(hi));
  if (!settings_.empty()) chunks.append(" chunks by ");
  for (FcRank r : {FcRank::Agreement, FcRank::Magnitude})
    if (by[(int)r] > 0) {
      if (chunks.back() != ' ') chunks.append(", ");
      chunks.append(name_of(r));
      if (by[(int)r] < (int)settings_.size())
        chunks.append(" (").append(std::to_string(by[(int)r])).append(by[(int)r] == 1 ? " layer)" : " layers)");
    }
  if (rank_ == FcRank::Auto && !settings_.empty()) chunks += profile_chose_ ? " (the profile's choice)" : " (the profile has no choice: agreement)";
  if (sink_ > 0 || recent_ > 0)  // forced rows: what differs from the paper's FASA
    chunks.append(", the first ").append(std::to_string(sink_)).append(" and last ").append(std::to_string(recent_))
        .append(" tokens kept (at most half the budget)");
  return SparsePolicy::summary() + buf + chunks;
}

double FasaPolicy::kdom_share() const {
  double sum = 0;
  int planes = 0;
  for (const KeyLayout& l : layouts_)
    if (l.n_dom > 0) {
      sum += (double)l.n_dom / (double)l.perm.size();
      ++planes;
    }
  return planes ? sum / planes : 0.0;
}

std::optional<DeviceSelection> FasaPolicy::device_selection(int n_layer) const {
  if (mass_ > 0) return std::nullopt;
  DeviceSelection s;
  for (int l = 0; l < n_layer; ++l) s.dense.push_back(is_dense_layer(l));
  s.layouts = layouts_;
  s.scored = dims_;
  s.budget = budget_;
  s.sink = sink_;
  s.recent = recent_;
  return s;
}

void FasaPolicy::pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
                      std::vector<int32_t>* rows) {
  const int64_t n = kv.n_tokens;
  // Forced rows count inside the budget, at most half of it: sink first, then recent; TIP fills the
  // rest from between.
  const auto [sink, recent] = forced_rows(sink_, recent_, budget);
  for (int i = 0; i < n_q; ++i) {
    for (int64_t r = 0; r < sink; ++r) rows[i].push_back((int32_t)r);
    for (int64_t r = n - recent; r < n; ++r) rows[i].push_back((int32_t)r);
  }
  const int64_t lo = sink, hi = n - recent, want = budget - sink - recent;
  if (want <= 0) return;

  // TIP: one pass over the K_dom plane scores every head of the group; a head scoring a subset of
  // the plane (per-head chunk sets) has zeros on the other dims. The scores only rank, so on an int8
  // plane the queries are rounded to int8 too (tip_rank_scores).
  const int nd = kv.n_dom;
  thread_local std::vector<float> q_dom;  // [n_q, n_dom]
  q_dom.assign((size_t)n_q * nd, 0.0f);
  for (int i = 0; i < n_q; ++i) {
    const size_t idx = (size_t)queries[i].layer * n_head_ + queries[i].q_head;
    for (int d : dims_[idx]) q_dom[(size_t)i * nd + d] = queries[i].q[d];
  }
  tip_top_rows(q_dom.data(), n_q, kv, lo, hi, want, rows, mass_, scale_);
}

void tip_top_rows(const float* q_dom, int n_q, const KvHeadView& kv, int64_t lo, int64_t hi, int64_t want,
                  std::vector<int32_t>* rows, double mass, float scale) {
  const int64_t m = hi - lo;
  thread_local std::vector<float> score;  // [n_q, m]
  score.resize((size_t)n_q * m);
  tip_rank_scores(q_dom, n_q, kv.tip_plane(), kv.tip_type(), kv.n_dom, lo, hi, score.data());
  count_kv_bytes_read(kv, (uint64_t)m * kv_row_bytes(kv.tip_type(), kv.n_dom));
  thread_local std::vector<int32_t> top;
  for (int i = 0; i < n_q; ++i) {
    const float* s = &score[(size_t)i * m];
    if (mass <= 0 || mass >= 1) {
      append_top_k(s, m, want, (int32_t)lo, rows[i]);
      continue;
    }
    top_k_indices(s, m, std::min(want, m), top);
    top.resize((size_t)std::min(want, m));
    std::sort(top.begin(), top.end(), [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    const float best = s[top[0]];
    float z = 0;  // every term <= 1 (best is the largest score)
    for (int64_t j = 0; j < m; ++j) z += std::exp((s[j] - best) * scale);
    float kept = 0;
    for (int32_t j : top) {
      rows[i].push_back((int32_t)lo + j);
      kept += std::exp((s[j] - best) * scale);
      if (kept >= (float)mass * z) break;
    }
  }
}

int fasa_sink(const PolicyOptions& o) { return o.sink >= 0 ? o.sink : FasaOptions::kDefaultSink; }
int fasa_recent(const PolicyOptions& o) { return o.recent >= 0 ? o.recent : FasaOptions::kDefaultRecent; }

std::unique_ptr<FasaPolicy> make_fasa_policy_from(const Profile& p, const PolicyOptions& o, const Model& model) {
  FasaOptions f;
  f.budget = o.budget;
  f.n_tip = o.fcs;
  f.sharing = o.fc_sharing;
  f.rank = o.fc_rank;
  f.adaptive = o.fc_alloc == FcAlloc::Adaptive;
  f.dense_layers = o.dense_layers;
  f.sink = fasa_sink(o);
  f.recent = fasa_recent(o);
  f.mass = o.tip_mass;
  return std::make_unique<FasaPolicy>(p, model.config, f);
}

Profile policy_profile(const PolicyOptions& o, const Model& model, const AutoProfileStore* autos) {
  if (!wants_auto_profile(o)) {
    if (o.profile.empty())  // the bench's stand-in: seeded random chunks
      return synthetic_profile(model, o.fcs > 0 ? o.fcs : default_n_tip(model.config), o.seed);
    Profile p = load_profile(o.profile);
    check_profile_matches(p, model, o.profile);
    return p;
  }
  std::optional<Profile> p = autos ? autos->find() : std::nullopt;
  if (!p)
    throw Error("attn '" + o.attn + "': no profile of this model yet: a prompt of at least " +
                std::to_string(PromptProfiler::kMinTokens) + " tokens makes one (profile 'auto'), or give a profile FILE "
                "(from `fasa calibrate`)");
  return *p;
}

std::unique_ptr<AttentionPolicy> make_fasa_policy(const PolicyOptions& o, const Model& model, AutoProfileStore* autos) {
  return make_fasa_policy_from(policy_profile(o, model, autos), o, model);
}

int fasa_chunks(const PolicyOptions& o, const Model& model) {
  if (o.attn != "fasa") return 0;
  if (o.fcs > 0) return o.fcs;
  if (o.profile.empty() && o.synthetic_profile) return default_n_tip(model.config);  // (no choice in it)
  const bool chosen = o.fc_rank == FcRank::Auto;  // each layer as the profile chose, where it did
  if (o.profile.empty() || o.profile == "auto") return chosen ? 0 : default_n_tip(model.config);
  const Profile p = load_profile(o.profile);
  return chosen && p.choice ? 0 : p.n_tip;
}

std::string fasa_settings(const PolicyOptions& o, const Model& model) {
  const int fcs = fasa_chunks(o, model);
  std::string v = "fcs=" + (fcs ? std::to_string(fcs) : std::string("chosen")) + " sharing=" + name_of(o.fc_sharing);
  if (o.fc_alloc != FcAlloc::Uniform) v = "alloc=" + std::string(name_of(o.fc_alloc)) + " " + v;
  if (o.fc_rank != FcRank::Auto) v = "rank=" + std::string(name_of(o.fc_rank)) + " " + v;
  if (fasa_sink(o) != FasaOptions::kDefaultSink || fasa_recent(o) != FasaOptions::kDefaultRecent)
    v += " sink=" + std::to_string(fasa_sink(o)) + " recent=" + std::to_string(fasa_recent(o));
  if (o.tip_mass > 0) {
    char mass[32];
    std::snprintf(mass, sizeof mass, " mass=%g", o.tip_mass);
    v += mass;
  }
  return v;
}

}  // namespace fasa
