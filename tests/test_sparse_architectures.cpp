// Sparse decoding on the Gemma 3 (its global layer), Qwen3-MoE and Phi-3 shapes (`fasa make-model`,
// random F32 weights): every policy at a budget well below the context, FASA with its defaults (a
// profile whose chunk choice differs from layer to layer). A recording session decodes
// with the policy in its own cache layout (FASA's K_dom plane and all); a replay session decodes the
// same tokens on a plain cache, attending to exactly the recorded rows, and
//   - where a brute-force selector exists (FASA, Oracle, StreamingLLM, Quest, SparQ, DoubleSparse),
//     recomputes the policy's choice from the replay's model-order query and keys: the same rows;
//   - gives the same logits within 1e-5 (normalised): attention over the chosen rows as plain
//     gathered attention computes it. (H2O and SnapKV, whose choices depend on every earlier step's
//     attention, and Random: this second check only.)
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "bench/synthetic_model.h"
#include "calib/fc_layout.h"
#include "calib/profile.h"
#include "model/model.h"
#include "model/session.h"
#include "sparse/policy.h"
#include "test_util.h"

namespace fasa {
namespace {

constexpr int kPrompt = 96, kSteps = 6, kBudget = 20;

using Key = std::tuple<int, int, int64_t>;  // layer, query head, rows in the cache

// The policy under test, recording every sparse choice it makes.
class Recording : public AttentionPolicy {
 public:
  explicit Recording(std::unique_ptr<AttentionPolicy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  void select(const AttentionQuery* qs, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) override {
    inner_->select(qs, n_q, kv, rows, sparse);
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n_q; ++i)
      if (sparse[i]) rows_[{qs[i].layer, qs[i].q_head, kv.n_tokens}] = rows[i];
  }
  KeyLayout key_layout(int layer, int kv_head) const override { return inner_->key_layout(layer, kv_head); }
  void observe_prefill(int layer, int64_t p0, int n, const float* q, const KvCache& c) override {
    inner_->observe_prefill(layer, p0, n, q, c);
  }
  void on_truncate(int64_t n) override { inner_->on_truncate(n); }

  std::map<Key, std::vector<int32_t>> rows_;

 private:
  std::unique_ptr<AttentionPolicy> inner_;
  std::mutex mu_;
};

// The brute-force choice of `policy` for one query head (model-order q and keys), or nullopt where
// the policy keeps state across steps (H2O, SnapKV) or draws at random.
struct BruteForce {
  const ModelConfig& c;
  const Profile& profile;  // FASA's

  std::optional<std::set<int32_t>> rows(const std::string& policy, const AttentionQuery& q, const KvHeadView& kv) const {
    const int D = c.head_dim;
    const int64_t n = kv.n_tokens;
    auto top = [&](const std::function<double(int64_t)>& score, int64_t from, int64_t to, int64_t k) {
      std::vector<int64_t> idx(to - from);
      std::iota(idx.begin(), idx.end(), from);
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return score(a) > score(b); });
      return std::set<int32_t>(idx.begin(), idx.begin() + std::min<int64_t>(k, to - from));
    };
    auto dot = [&](int64_t j, const std::vector<int>& dims) {
      double s = 0;
      for (int d : dims) s += (double)q.q[d] * kv.key(j, d);
      return s;
    };
    std::vector<int> all(D);
    std::iota(all.begin(), all.end(), 0);
    if (policy == "oracle") return top([&](int64_t j) { return dot(j, all); }, 0, n, kBudget);
    if (policy == "fasa") {
      std::vector<int> dims;
      const FcLayout fcs(c);
      const ChunkSetting chosen = profile.setting(q.layer, FcRank::Auto, 0);
      for (int f : profile.dominant_fcs(q.layer, q.q_head, chosen.n_fc, FcSharing::Group, chosen.rank))
        for (int d : fcs.dims(f)) dims.push_back(d);
      // fasa's defaults: the first token and the last 15, together at most half the budget; TIP the rest
      const int64_t sink = 1, recent = std::min<int64_t>(15, kBudget / 2 - sink);
      std::set<int32_t> s = top([&](int64_t j) { return dot(j, dims); }, sink, n - recent, kBudget - sink - recent);
      s.insert(0);
      for (int64_t j = n - recent; j < n; ++j) s.insert((int32_t)j);
      return s;
    }
    if (policy == "doublesparse") {  // the KV head's 2 n_tip channels of largest summed statistic score every key
      const int group = c.n_head / c.n_head_kv;
      std::vector<double> weight(D, 0.0);
      for (int h = q.kv_head * group; h < (q.kv_head + 1) * group; ++h)
        for (int d = 0; d < D; ++d) weight[d] += profile.channel_qk[((size_t)q.layer * c.n_head + h) * D + d];
      std::vector<int> dims = all;
      std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return weight[a] > weight[b]; });
      dims.resize(2 * default_n_tip(c));
      return top([&](int64_t j) { return dot(j, dims); }, 0, n, kBudget);
    }
    if (policy == "stream") {  // 8 sinks and the newest rows
      std::set<int32_t> s;
      for (int64_t j = 0; j < 8; ++j) s.insert((int32_t)j);
      for (int64_t j = n - (kBudget - 8); j < n; ++j) s.insert((int32_t)j);
      return s;
    }
    if (policy == "sparq") {  // the query's D/4 largest |q| dims score every key
      std::vector<int> dims = all;
      std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return std::fabs(q.q[a]) > std::fabs(q.q[b]); });
      dims.resize(D / 4);
      return top([&](int64_t j) { return dot(j, dims); }, 0, n, kBudget);
    }
    if (policy == "quest") {  // the newest page, then whole 16-row pages by their min/max bound
      constexpr int64_t kPage = 16;
      const int64_t last = (n - 1) / kPage;
      std::set<int32_t> s;
      for (int64_t j = std::max(last * kPage, n - kBudget); j < n; ++j) s.insert((int32_t)j);
      const int64_t more = std::min<int64_t>(last, (kBudget - (int64_t)s.size()) / kPage);
      auto bound = [&](int64_t p) {
        double b = 0;
        for (int d = 0; d < D; ++d) {
          float lo = INFINITY, hi = -INFINITY;
          for (int64_t j = p * kPage; j < (p + 1) * kPage; ++j) lo = std::min(lo, kv.key(j, d)), hi = std::max(hi, kv.key(j, d));
          b += std::max(q.q[d] * lo, q.q[d] * hi);
        }
        return b;
      };
      for (int32_t p : top(bound, 0, last, more))
        for (int64_t j = p * kPage; j < (p + 1) * kPage; ++j) s.insert((int32_t)j);
      return s;
    }
    return std::nullopt;
  }
};

// Replays the recorded rows on a plain cache, checking them against the brute-force choice.
class Replay : public AttentionPolicy {
 public:
  Replay(const Recording& rec, const std::string& policy, BruteForce bf) : rec_(rec), policy_(policy), bf_(bf) {}
  std::string_view name() const override { return "replay"; }
  void select(const AttentionQuery* qs, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) override {
    for (int i = 0; i < n_q; ++i) {
      const AttentionQuery& q = qs[i];
      const auto it = rec_.rows_.find({q.layer, q.q_head, kv.n_tokens});
      sparse[i] = it != rec_.rows_.end();  // (not recorded: the policy attended densely)
      if (!sparse[i]) continue;
      rows[i] = it->second;
      const auto want = bf_.rows(policy_, q, kv);
      std::lock_guard<std::mutex> lock(mu_);
      ++replayed;
      if (want) {
        ++checked;
        if (*want != std::set<int32_t>(rows[i].begin(), rows[i].end()) || want->size() != rows[i].size()) ++differing;
      }
    }
  }
  int replayed = 0, checked = 0, differing = 0;

 private:
  const Recording& rec_;
  std::string policy_;
  BruteForce bf_;
  std::mutex mu_;
};

// Greedy decoding of kSteps tokens after `prompt`; the logits of each step.
std::vector<std::vector<float>> decode(Session& s, const std::vector<int32_t>& prompt) {
  std::vector<std::vector<float>> out;
  std::span<const float> logits = s.prefill(prompt);
  for (int i = 0; i < kSteps; ++i) {
    out.emplace_back(logits.begin(), logits.end());
    logits = s.decode((int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return out;
}

void expect_sparse_equals_reference(const std::string& shape) {
  const std::string path = test::temp_dir() + "/" + shape + ".gguf";
  write_synthetic_model(find_model_shape(shape), DType::F32, path, 1);
  auto model = load_model(path);
  const ModelConfig& c = model->config;
  std::vector<int32_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[i] = (int32_t)((i * 7919 + 13) % c.n_vocab);
  SessionOptions so;
  so.cache.types = {DType::F32, DType::F32};  // the brute force reads what the policy read
  // FASA's and DoubleSparse's profile: seeded statistics, and a chunk choice that alternates between
  // a quarter of the chunks by agreement and half by magnitude (the default, --fc-rank auto, follows it)
  Profile profile = synthetic_profile(*model, default_n_tip(c), 1);
  profile.top_k = 1;  // (a file needs one)
  ChunkChoice choice;
  for (int l = 0; l < c.n_layer; ++l) {
    const ChunkSetting s = l % 2 ? ChunkSetting{FcRank::Magnitude, profile.n_fc / 2} : ChunkSetting{FcRank::Agreement, profile.n_fc / 4};
    choice.layers.push_back(s);
    choice.measured.push_back({{s, 0.95, 0.95}});
  }
  profile.choice = choice;
  PolicyOptions o;
  o.profile = test::temp_dir() + "/" + shape + ".profile.json";
  save_profile(profile, o.profile);
  o.budget = Budget::count(kBudget);
  o.dense_layers = {};
  for (const PolicyInfo& info : policy_registry()) {
    if (info.dense) continue;
    o.attn = info.name;
    auto recording = std::make_shared<Recording>(make_policy(o, *model, nullptr));
    Session sparse(*model, so, recording);
    const auto got = decode(sparse, prompt);
    auto replay = std::make_shared<Replay>(*recording, info.name, BruteForce{c, profile});
    Session plain(*model, so, replay);
    const auto want = decode(plain, prompt);
    EXPECT_GT(replay->replayed, 0) << shape << " " << info.name << ": never sparse";
    EXPECT_EQ(replay->differing, 0) << shape << " " << info.name << ": of " << replay->checked << " choices";
    for (int i = 0; i < kSteps; ++i)
      EXPECT_LE(test::normalized_error(got[i].data(), want[i].data(), got[i].size()), 1e-5)
          << shape << " " << info.name << " step " << i;
    const std::string name = info.name;
    if (name != "h2o" && name != "snapkv" && name != "random") {
      EXPECT_EQ(replay->checked, replay->replayed) << shape << " " << name;
    }
  }
}

TEST(SparseArchitectures, Gemma3GlobalLayersChooseAsTheBruteForceDoes) { expect_sparse_equals_reference("gemma3-tiny"); }
TEST(SparseArchitectures, Qwen3MoeChoosesAsTheBruteForceDoes) { expect_sparse_equals_reference("qwen3moe-tiny"); }
TEST(SparseArchitectures, Phi3ChoosesAsTheBruteForceDoes) { expect_sparse_equals_reference("phi3-tiny"); }

}  // namespace
}  // namespace fasa
