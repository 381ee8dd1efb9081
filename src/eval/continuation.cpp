#include "eval/continuation.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "calib/auto_profile.h"
#include "eval/decode_eval.h"
#include "eval/policy_runs.h"
#include "eval/shared_prefill.h"
#include "fasa/error.h"
#include "model/sampler.h"
#include "util/progress.h"

namespace fasa {

std::vector<std::vector<int32_t>> continuation_prompts(const Model& m, const std::string& text, const ContinuationOptions& o) {
  if (o.prompts < 1 || o.tokens < 1 || o.first < 1 || o.prompt_tokens < 2)
    throw Error("continuation: prompts, tokens and first must be at least 1, the prompt length at least 2");
  const Tokenizer& tok = m.tokenizer;
  const std::vector<int32_t> tokens = tok.encode(text, false);
  const int64_t body = o.prompt_tokens - (tok.add_bos() ? 1 : 0);  // each prompt's text tokens
  if ((int64_t)tokens.size() < body)
    throw Error("continuation: the text has " + std::to_string(tokens.size()) + " tokens, fewer than one prompt's " +
                std::to_string(body));
  const int64_t last_start = (int64_t)tokens.size() - body;
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < o.prompts; ++i) {
    const int64_t start = o.prompts == 1 ? 0 : last_start * i / (o.prompts - 1);
    std::vector<int32_t>& p = out.emplace_back();
    if (tok.add_bos()) p.push_back(tok.bos());
    p.insert(p.end(), tokens.begin() + start, tokens.begin() + start + body);
  }
  return out;
}

namespace {

// `n` greedy tokens after the shared prefill, with the KV bytes their decode steps read.
std::vector<int32_t> greedy_continuation(Session& s, int n, uint64_t& kv_bytes) {
  const uint64_t before = s.cache().bytes_read();
  std::vector<int32_t> out;
  std::span<const float> logits = s.logits();
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < n) logits = s.decode(out.back());
  }
  kv_bytes += s.cache().bytes_read() - before;
  return out;
}

// One policy x budget's shared prefixes, one per prompt.
struct Shared {
  std::vector<int> lengths;
  uint64_t kv_bytes = 0;
  int64_t steps = 0;
};

double median(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<EvalRecord> eval_continuation(const Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<std::string>& policies, const std::vector<std::string>& budgets,
                                          const PolicyOptions& base, const ContinuationOptions& o) {
  if (prompts.empty()) throw Error("continuation: no prompts");
  AutoProfileStore autos(m);
  const std::vector<PolicyRun> runs = policy_runs(m, policies, base);
  prepare_auto_profile(autos, runs, prompts);
  PolicyOptions full = base;
  full.attn = kDenseAttn;
  std::vector<std::map<std::string, Shared>> shared(runs.size());  // [run][budget]
  ProgressBar bar("continuation", (int64_t)prompts.size());
  for (const auto& prompt : prompts) {
    const SharedPrefill pre = prefill_for_policies(m, prompt, o.tokens);
    uint64_t unused = 0;
    const std::vector<int32_t> want = greedy_continuation(*start_from(m, make_policy(full, m, nullptr), full, pre), o.tokens, unused);
    for (size_t r = 0; r < runs.size(); ++r)
      for (const auto& budget : budgets) {
        PolicyOptions po = runs[r].options;
        po.budget = Budget::parse(budget);
        Shared& y = shared[r][budget];
        const auto got = greedy_continuation(*start_from(m, make_policy(po, m, &autos), po, pre), o.tokens, y.kv_bytes);
        y.lengths.push_back((int)(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin()));
        y.steps += o.tokens - 1;
      }
    bar.advance();
  }
  std::vector<EvalRecord> out;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& budget : budgets) {
      const Shared& y = shared[r][budget];
      const auto n = (int64_t)y.lengths.size();
      auto add = [&](const char* metric, double value, int64_t count) {
        out.push_back({"continuation", runs[r].name, runs[r].variant, budget, metric, "", 0, value, count});
      };
      const int64_t first = std::count_if(y.lengths.begin(), y.lengths.end(), [&](int l) { return l >= std::min(o.first, o.tokens); });
      add("shared", median(y.lengths), n);
      add("shared_mean", (double)std::accumulate(y.lengths.begin(), y.lengths.end(), int64_t{0}) / (double)n, n);
      add("first_equal", (double)first / (double)n, n);
      add("kv_kib", y.steps ? (double)y.kv_bytes / 1024.0 / (double)y.steps : 0, y.steps);
    }
  return out;
}

}  // namespace fasa
