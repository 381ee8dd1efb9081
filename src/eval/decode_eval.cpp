#include "eval/decode_eval.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include "calib/agreement.h"
#include "calib/auto_profile.h"
#include "eval/policy_runs.h"
#include "sparse/policy.h"
#include "model/sampler.h"
#include "model/session.h"
#include "ops/attention.h"
#include "ops/topk.h"
#include "fasa/error.h"
#include "util/progress.h"

namespace fasa {

namespace {

// Wraps policies that want the same cache (KV types, key layouts): lets each choose, counts how many of
// the exact top-K (its own K) it chose, then attends densely. The trajectory is dense whatever they
// choose, so one decode serves them all, and each query's exact scores and top-K are found once.
class ShadowProbe final : public AttentionPolicy {
 public:
  struct Shadow {
    std::unique_ptr<AttentionPolicy> policy;
    int k;
    std::atomic<int64_t> hits{0}, queries{0};  // rows chosen among the exact top k; sparse queries (context > k)
  };
  explicit ShadowProbe(std::vector<std::unique_ptr<Shadow>> shadows) : shadows_(std::move(shadows)) {}
  std::string_view name() const override { return shadows_[0]->policy->name(); }
  std::string summary() const override { return shadows_[0]->policy->summary(); }
  KeyLayout key_layout(int layer, int kv_head) const override { return shadows_[0]->policy->key_layout(layer, kv_head); }
  void observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& c) override {
    for (auto& s : shadows_) s->policy->observe_prefill(layer, p0, n, q, c);
  }
  void on_truncate(int64_t n) override {
    for (auto& s : shadows_) s->policy->on_truncate(n);
  }
  void select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) override {
    const size_t n_s = shadows_.size();
    thread_local std::vector<std::vector<int32_t>> chosen;  // [n_s * n_q]: each shadow's rows per query head
    thread_local std::unique_ptr<bool[]> chosen_sparse;     // [n_s * n_q]
    if (chosen.size() < n_s * n_q) {
      chosen.resize(n_s * n_q);
      chosen_sparse = std::make_unique<bool[]>(n_s * n_q);
    }
    for (size_t s = 0; s < n_s; ++s) {
      for (int i = 0; i < n_q; ++i) chosen[s * n_q + i].clear();
      shadows_[s]->policy->select(queries, n_q, kv, &chosen[s * n_q], &chosen_sparse[s * n_q]);
    }
    thread_local std::vector<float> score;  // [kv.n_tokens]: one query head's exact scores
    thread_local std::vector<int32_t> idx;
    thread_local std::vector<char> top;     // [kv.n_tokens]: in the exact top k
    for (int i = 0; i < n_q; ++i) {
      bool scored = false;
      int top_k = -1;  // the k `top` holds (shadows come in order of k)
      for (size_t s = 0; s < n_s; ++s) {
        Shadow& sh = *shadows_[s];
        if (!chosen_sparse[s * n_q + i] || kv.n_tokens <= sh.k) continue;
        if (!scored) {
          score.resize(kv.n_tokens);
          for (int64_t j = 0; j < kv.n_tokens; ++j) score[j] = key_dot(queries[i].q, kv, j);
          scored = true;
        }
        if (top_k != sh.k) {
          top_k_mask(score.data(), kv.n_tokens, sh.k, idx, top);
          top_k = sh.k;
        }
        int64_t h = 0;
        for (int32_t r : chosen[s * n_q + i]) h += top[r];
        sh.hits += h;
        sh.queries += 1;
      }
      rows[i].clear();
      sparse[i] = false;
    }
  }
  const Shadow& shadow(size_t s) const { return *shadows_[s]; }

 private:
  std::vector<std::unique_ptr<Shadow>> shadows_;
};

struct Scores {
  double nll = 0, kld = 0;
  int64_t top1 = 0, n = 0;
  uint64_t kv_bytes = 0;  // KV read by the scored steps (attention and selection: ops/kv_traffic.h)
};

// Full attention's logits after each position of a window, from a dense prefill of it, a chunk at a
// time (whole ubatches: the same passes, so the same logits, as one prefill of the window).
class ReferenceLogits {
 public:
  ReferenceLogits(const Model& m, const std::vector<int32_t>& w) : session_(m, dense_options(w)), w_(w) {}
  // [n_vocab] after position i; i only ascends.
  const float* at(int64_t i) {
    while (i >= end_) {
      const int64_t n = std::min<int64_t>(SessionOptions{}.n_ubatch, (int64_t)w_.size() - end_);
      session_.prefill(std::span<const int32_t>(w_).subspan(end_, n), &chunk_);
      begin_ = end_, end_ += n;
    }
    return &chunk_[(i - begin_) * session_.model().config.n_vocab];
  }

 private:
  static SessionOptions dense_options(const std::vector<int32_t>& w) {
    SessionOptions so;
    so.n_ctx = (int64_t)w.size();
    return so;
  }
  Session session_;
  const std::vector<int32_t>& w_;
  std::vector<float> chunk_;  // [end_ - begin_, n_vocab]
  int64_t begin_ = 0, end_ = 0;
};

// Feeds a window token by token, on a cache of the policy options' KV types; with `score`, scores each
// prediction against full attention's.
void decode_window(const Model& m, std::shared_ptr<AttentionPolicy> policy, const PolicyOptions& po,
                   const std::vector<int32_t>& w, int64_t score_from, Scores* score, ProgressBar& bar) {
  Session session(m, session_options(po, (int64_t)w.size()), std::move(policy));
  std::optional<ReferenceLogits> ref;
  if (score) ref.emplace(m, w);
  const int V = m.config.n_vocab;
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    const uint64_t read_before = session.cache().bytes_read();
    auto logits = session.decode(w[i]);
    bar.advance();
    if (!score || (int64_t)i < score_from) continue;
    Scores& s = *score;
    s.kv_bytes += session.cache().bytes_read() - read_before;
    const float* r = ref->at((int64_t)i);
    // log-softmax of both in double
    double mp = -INFINITY, mr = -INFINITY;
    for (int v = 0; v < V; ++v) {
      mp = std::max(mp, (double)logits[v]);
      mr = std::max(mr, (double)r[v]);
    }
    double zp = 0, zr = 0;
    for (int v = 0; v < V; ++v) {
      zp += std::exp(logits[v] - mp);
      zr += std::exp(r[v] - mr);
    }
    const double lzp = mp + std::log(zp), lzr = mr + std::log(zr);
    double kl = 0;
    for (int v = 0; v < V; ++v) {
      const double lr = r[v] - lzr, lp = logits[v] - lzp;
      kl += std::exp(lr) * (lr - lp);
    }
    s.kld += std::max(0.0, kl);
    s.nll += lzp - logits[w[i + 1]];
    s.top1 += argmax(logits) == argmax(std::span<const float>(r, V));
    s.n++;
  }
}

int64_t total_steps(const ReferenceRun& ref) {
  int64_t t = 0;
  for (auto& w : ref.windows) t += (int64_t)w.size() - 1;
  return t;
}

}  // namespace

ReferenceRun reference_run(const Model& m, const std::string& text, const TextEvalOptions& o) {
  const std::vector<int32_t> tokens = m.tokenizer.encode(text, m.tokenizer.add_bos());
  const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : m.config.n_ctx_train;
  ReferenceRun ref;
  for (auto& w : token_windows(tokens, n_ctx, m.tokenizer.bos())) {
    if ((int)ref.windows.size() >= o.windows) break;
    if (w.size() >= 2) ref.windows.push_back(std::move(w));
  }
  if (ref.windows.empty()) throw Error("the text gives no window of at least 2 tokens");
  return ref;
}

bool auto_profile_wanted(const AutoProfileStore& autos, const std::vector<PolicyRun>& runs) {
  return std::any_of(runs.begin(), runs.end(), [&](const PolicyRun& r) { return auto_profile_pending(r.options, &autos); });
}

void prepare_auto_profile(AutoProfileStore& autos, const std::vector<PolicyRun>& runs,
                          const std::vector<std::vector<int32_t>>& prompts) {
  if (!auto_profile_wanted(autos, runs)) return;
  const int64_t need = PromptProfiler::kMinTokens;
  for (const auto& p : prompts)
    if ((int64_t)p.size() >= need) {
      make_auto_profile(autos, p);
      return;
    }
  // Shorter prompts (tasks at 1024 tokens and below): as many as it takes, laid end to end, each after
  // the first without its BOS.
  const int32_t bos = autos.model().tokenizer.bos();
  std::vector<int32_t> joined;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    joined.insert(joined.end(), p.begin() + (!joined.empty() && !p.empty() && p[0] == bos), p.end());
    if ((int64_t)joined.size() < need) continue;
    std::fprintf(stderr, "note: no prompt has the %lld tokens FASA's automatic profile is measured on: it is measured on "
                 "the first %zu laid end to end\n", (long long)need, i + 1);
    make_auto_profile(autos, joined);
    return;
  }
  throw Error("a policy that scores on a profile's chunks, without a profile: the prompts together have " + std::to_string(joined.size()) + " of the " +
              std::to_string(need) + " tokens an automatic profile is measured on; give a profile (from `fasa calibrate`)");
}

std::vector<EvalRecord> eval_perplexity(const Model& m, const ReferenceRun& ref, const std::vector<std::string>& policies,
                                        const std::vector<std::string>& budgets, const PolicyOptions& base,
                                        const TextEvalOptions& o) {
  const std::vector<PolicyRun> runs = policy_runs(m, policies, base);
  AutoProfileStore autos(m);  // this run's (with the model's cached file)
  prepare_auto_profile(autos, runs, ref.windows);
  std::vector<EvalRecord> out;
  for (const PolicyRun& run : runs) {
    Scores full_scores;  // `full` does not depend on the budget: run it once
    bool full_done = false;
    for (const auto& budget : budgets) {
      PolicyOptions po = run.options;
      po.budget = Budget::parse(budget);
      Scores s;
      if (policy_info(run.name).dense && full_done) {
        s = full_scores;
      } else {
        ProgressBar bar("ppl " + run.name + " @ " + budget, total_steps(ref));
        for (size_t w = 0; w < ref.windows.size(); ++w)
          decode_window(m, make_policy(po, m, &autos), po, ref.windows[w], o.score_from, &s, bar);
        full_scores = s;
        full_done = policy_info(run.name).dense;
      }
      if (s.n == 0) throw Error("no position was scored (is --score-from past the window length?)");
      const double nll = s.nll / s.n;
      for (auto [metric, value] : {std::pair<const char*, double>{"nll", nll}, {"ppl", std::exp(nll)},
                                   {"kld", s.kld / s.n}, {"top1", (double)s.top1 / s.n},
                                   {"kv_kib", (double)s.kv_bytes / 1024.0 / (double)s.n}})
        out.push_back({"ppl", run.name, run.variant, budget, metric, "", 0, value, s.n});
    }
  }
  return out;
}

namespace {

// One record of an agreement run: a policy run at one K, its options and its running counts.
struct CaProbe {
  const PolicyRun* run;
  int k;
  PolicyOptions options;
  int64_t hits = 0, queries = 0;
};

// The probes whose sessions are alike (KV types, key layouts), so one dense decode serves
// them: indices into `probes`, groups in the order of their first member.
std::vector<std::vector<size_t>> same_cache_groups(const Model& m, const std::vector<CaProbe>& probes,
                                                   AutoProfileStore& autos) {
  struct Cache {
    CacheOptions options;
    std::vector<KeyLayout> layouts;  // [n_layer * n_head_kv]
    bool operator==(const Cache&) const = default;
  };
  std::vector<Cache> caches;
  std::vector<std::vector<size_t>> groups;
  for (size_t p = 0; p < probes.size(); ++p) {
    Cache c{probes[p].options.cache, key_layouts(*make_policy(probes[p].options, m, &autos), m.config)};
    const size_t g = std::find(caches.begin(), caches.end(), c) - caches.begin();
    if (g == caches.size()) {
      caches.push_back(std::move(c));
      groups.emplace_back();
    }
    groups[g].push_back(p);
  }
  for (auto& g : groups)  // a query's top-K mask then changes once per K
    std::stable_sort(g.begin(), g.end(), [&](size_t a, size_t b) { return probes[a].k < probes[b].k; });
  return groups;
}

// A group's progress line: its runs and Ks, each once ("ca stream, quest @ K=64,256").
std::string group_label(const std::vector<CaProbe>& probes, const std::vector<size_t>& group) {
  std::vector<std::string> names, ks;
  const auto add_once = [](std::vector<std::string>& list, const std::string& item) {
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
  };
  for (size_t p : group) {
    const PolicyRun& r = *probes[p].run;
    add_once(names, r.name + (r.variant.empty() ? "" : " [" + r.variant + "]"));
    add_once(ks, std::to_string(probes[p].k));
  }
  std::string label = "ca";
  for (size_t i = 0; i < names.size(); ++i) label += (i ? ", " : " ") + names[i];
  label += " @ K=";
  for (size_t i = 0; i < ks.size(); ++i) label += (i ? "," : "") + ks[i];
  return label;
}

}  // namespace

std::vector<EvalRecord> eval_selection_agreement(const Model& m, const ReferenceRun& ref,
                                                 const std::vector<std::string>& policies,
                                                 const std::vector<int>& top_ks, const PolicyOptions& base,
                                                 const TextEvalOptions& o) {
  const std::vector<PolicyRun> runs = policy_runs(m, policies, base);
  AutoProfileStore autos(m);  // this run's (with the model's cached file)
  prepare_auto_profile(autos, runs, ref.windows);
  for (int k : top_ks)
    if (k < 1) throw Error("ca: top-K must be at least 1, not " + std::to_string(k));
  std::vector<CaProbe> probes;  // in the records' order
  for (const PolicyRun& run : runs) {
    if (policy_info(run.name).dense) continue;  // selects everything: nothing to measure
    for (int k : top_ks) {
      PolicyOptions po = run.options;
      po.budget = Budget::count(k);
      po.cache.offload = {};  // the probe scores every whole key, so every row stays resident
      probes.push_back({&run, k, po});
    }
  }
  for (const std::vector<size_t>& group : same_cache_groups(m, probes, autos)) {
    ProgressBar bar(group_label(probes, group), total_steps(ref));
    for (const auto& window : ref.windows) {
      std::vector<std::unique_ptr<ShadowProbe::Shadow>> shadows;
      for (size_t p : group) {
        shadows.push_back(std::make_unique<ShadowProbe::Shadow>());
        shadows.back()->policy = make_policy(probes[p].options, m, &autos);
        shadows.back()->k = probes[p].k;
      }
      auto probe = std::make_shared<ShadowProbe>(std::move(shadows));
      decode_window(m, probe, probes[group[0]].options, window, o.score_from, nullptr, bar);
      for (size_t i = 0; i < group.size(); ++i) {
        probes[group[i]].hits += probe->shadow(i).hits;
        probes[group[i]].queries += probe->shadow(i).queries;
      }
    }
  }
  std::vector<EvalRecord> out;
  for (const CaProbe& p : probes)
    out.push_back({"ca", p.run->name, p.run->variant, std::to_string(p.k), "ca", "", p.k,
                   p.queries ? (double)p.hits / ((double)p.queries * p.k) : 0.0, p.queries});
  return out;
}

}  // namespace fasa
