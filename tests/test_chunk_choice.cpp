// The chunk choice behind FASA's defaults (calib/chunk_choice.h): the rule, the probes, the recall
// meter against its definition, the profile's record of the choice, and the policy that follows it.
#include <algorithm>
#include <cmath>
#include <set>

#include "calib/chunk_choice.h"
#include "calib/fc_layout.h"
#include "fasa/error.h"
#include "model/model.h"
#include "sparse/fasa.h"
#include "test_util.h"

namespace fasa {
namespace {

CandidateRecall recall(FcRank r, int n, double copies) { return {{r, n}, copies, copies}; }
CandidateRecall recall(FcRank r, int n, double copies, double lookalikes) {
  return {{r, n}, copies, copies, lookalikes};
}

TEST(ChunkChoice, EachLayerKeepsTheFewestChunksReachingTheTarget) {
  const auto A = FcRank::Agreement, M = FcRank::Magnitude;
  const ChunkChoice c = decide_chunks(
      {{recall(A, 8, 0.50), recall(M, 8, 0.95), recall(A, 16, 0.97), recall(M, 16, 0.99)},   // magnitude reaches it at 8
       {recall(A, 8, 0.30), recall(M, 8, 0.40), recall(A, 16, 0.70), recall(M, 16, 0.60)},   // none does: the best
       {recall(A, 8, 0.93), recall(M, 8, 0.91), recall(A, 16, 0.99), recall(M, 16, 0.99)},   // both at 8: the better
       {},                                                                                     // not measured
       // 8 chunks find far copies but cannot tell look-alike records apart: 16 by agreement do both
       {recall(A, 8, 0.95, 0.50), recall(M, 8, 0.97, 0.60), recall(A, 16, 0.97, 0.93), recall(M, 16, 0.99, 0.85)}},
      RecallSettings{});
  ASSERT_EQ(c.layers.size(), 5u);
  EXPECT_EQ(c.layers[4], (ChunkSetting{A, 16}));
  EXPECT_EQ(c.layers[0], (ChunkSetting{M, 8}));
  EXPECT_EQ(c.layers[1], (ChunkSetting{A, 16}));
  EXPECT_EQ(c.layers[2], (ChunkSetting{A, 8}));
  EXPECT_EQ(c.layers[3].n_fc, 0);
  EXPECT_DOUBLE_EQ(c.chosen(0)->copies, 0.95);
  EXPECT_EQ(c.chosen(3), nullptr);
  EXPECT_EQ(chunk_candidates(32).size(), 4u);  // both rankings at 8 and 16
  EXPECT_EQ(chunk_candidates(32, 12), (std::vector<ChunkSetting>{{A, 12}, {M, 12}}));
}

TEST(ChunkChoice, ProbesCopySpansOfTheFirstHalfAndLookAlikeRecordsToTheEnd) {
  using W = ProbeWindow;
  std::vector<int32_t> w(1024);
  for (int i = 0; i < 1024; ++i) w[i] = i;
  RecallSettings s;
  const auto probes = probe_windows({w, std::vector<int32_t>(w.begin(), w.begin() + 640)}, s);
  ASSERT_EQ(probes.size(), 1u) << "a 640-token window cannot hold far copies";
  const ProbeWindow& p = probes[0];
  EXPECT_EQ(p.tokens.size(), 1024u);
  EXPECT_EQ(p.span, 32);
  EXPECT_EQ(p.copies_from, 1024 - 4 * 32 - W::kRecordCopies * W::kRecordLen);
  EXPECT_EQ(p.records_copied_from, p.copies_from + 4 * 32);
  ASSERT_EQ(p.record_at.size(), (size_t)W::kRecords);
  std::set<std::vector<int32_t>> keys;
  for (int r = 0; r < W::kRecords; ++r) {
    const int64_t at = p.record_at[r];
    EXPECT_GE(at, p.copies_from / 2) << "records lie in the second half";
    EXPECT_LE(at + W::kRecordLen, p.copies_from - s.window) << "far from their copies";
    if (r) {
      EXPECT_GE(at, p.record_at[r - 1] + W::kRecordLen) << "apart";
    }
    for (int i = 0; i < W::kTemplate; ++i) EXPECT_EQ(p.tokens[at + i], p.tokens[p.record_at[0] + i]) << "one template";
    keys.insert({p.tokens.begin() + at + W::kTemplate, p.tokens.begin() + at + W::kTemplate + W::kKey});
  }
  EXPECT_EQ(keys.size(), (size_t)W::kRecords) << "no two keys alike";
  for (int64_t i = 0; i < p.record_at[0]; ++i) ASSERT_EQ(p.tokens[i], i) << "text before the records";
  for (int64_t i = p.record_at.back() + W::kRecordLen; i < p.copies_from; ++i) ASSERT_EQ(p.tokens[i], i) << "and after";
  for (int64_t c = 0; c < 4; ++c) {
    const int32_t from = p.tokens[p.copies_from + c * p.span];
    EXPECT_LT(from + p.span, p.copies_from / 2) << "originals lie in the first half";
    for (int64_t i = 0; i < p.span; ++i) EXPECT_EQ(p.tokens[p.copies_from + c * p.span + i], from + i);
  }
  for (int c = 0; c < W::kRecordCopies; ++c) {  // each copy is one of the records, a different one each
    const auto copy = p.tokens.begin() + p.records_copied_from + c * W::kRecordLen;
    int same = 0;
    for (int64_t at : p.record_at) same += std::equal(copy, copy + W::kRecordLen, p.tokens.begin() + at);
    EXPECT_EQ(same, 1) << c;
    if (c) {
      EXPECT_FALSE(std::equal(copy, copy + W::kRecordLen, copy - W::kRecordLen)) << c;
    }
  }
}

// A text of one repeated token cannot key 16 different records: its probe has copies but no records
// (look-alikes not measured), rather than an error that would fail an automatic profile's prompt.
TEST(ChunkChoice, ATextTooPlainForRecordsStillProbesCopies) {
  const std::vector<int32_t> w(1024, 7);
  const auto probes = probe_windows({w}, RecallSettings{});
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_TRUE(probes[0].record_at.empty());
  EXPECT_EQ(probes[0].records_copied_from, (int64_t)probes[0].tokens.size()) << "no record copies";
  EXPECT_EQ(probes[0].records_copied_from, probes[0].copies_from + 4 * probes[0].span);
}

// RecallMeter's definition, written plainly for one candidate: per measured (query, head), the weight
// (attention's share on keys older than the window) times, on text and copies, whether full attention's
// top distant key is among the candidate's top `pick` distant keys on its chunks alone; on copied
// records, whether the candidate scores that key (where it lies in a record) above the same place in
// every other record.
class PlainRecall : public AttentionObserver {
 public:
  enum Kind { kText, kCopies, kLookalikes };
  PlainRecall(const Profile& p, const ModelConfig& c, ChunkSetting cand, RecallSettings s, const ProbeWindow& w)
      : p_(p), c_(c), cand_(cand), s_(s), w_(w) {}
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override {
    using W = ProbeWindow;
    const int D = c_.head_dim, H = c_.n_head, group = H / c_.n_head_kv;
    const FcLayout fcs(c_);
    for (int64_t pos = p0; pos < p0 + n; ++pos) {
      const int64_t T = pos + 1, far = T - s_.window;
      if (far < 2 * s_.pick) continue;
      Kind kind = kText;
      if (pos >= w_.records_copied_from) {
        const int64_t at = (pos - w_.records_copied_from) % W::kRecordLen;
        if (at < W::kTemplate + W::kKey - 1 || at > W::kRecordLen - 2) continue;
        kind = kLookalikes;
      } else if (pos >= w_.copies_from) {
        if ((pos - w_.copies_from) % w_.span < RecallMeter::kCopyLead) continue;
        kind = kCopies;
      } else if (pos % RecallMeter::kTextStride != 0) {
        continue;
      }
      for (int h = 0; h < H; ++h) {
        const float* qh = q + ((pos - p0) * H + h) * D;
        const KvHeadView kv = cache.view(layer, h / group, T);
        std::vector<int> dims;
        for (int f : p_.dominant_fcs(layer, h / group * group, cand_.n_fc, FcSharing::Group, cand_.rank))
          for (int d : fcs.dims(f)) dims.push_back(d);
        std::vector<double> full(T), part(far);
        for (int64_t j = 0; j < T; ++j)
          for (int d = 0; d < D; ++d) full[j] += (double)qh[d] * kv.key(j, d);
        for (int64_t j = 0; j < far; ++j)
          for (int d : dims) part[j] += (double)qh[d] * kv.key(j, d);
        const double top = *std::max_element(full.begin(), full.end());
        double w_far = 0, w_all = 0;
        for (int64_t j = 0; j < T; ++j) {
          const double e = std::exp((full[j] - top) * c_.attention_scale());
          w_all += e;
          if (j < far) w_far += e;
        }
        const int64_t best = std::max_element(full.begin(), full.begin() + far) - full.begin();
        bool hit = true;
        if (kind == kLookalikes) {
          int64_t in = -1;  // the record holding the best key
          for (int64_t at : w_.record_at)
            if (best >= at && best < at + W::kRecordLen) in = at;
          if (in < 0) continue;
          for (int64_t at : w_.record_at)
            if (at != in && part[at + best - in] >= part[best]) hit = false;
        } else {
          int64_t above = 0;  // the candidate's keys scoring above the best key's: it is in the top `pick` when fewer
          for (int64_t j = 0; j < far; ++j) above += part[j] > part[best];
          hit = above < s_.pick;
        }
        sum_[layer * 3 + kind] += w_far / w_all * hit;
        weight_[layer * 3 + kind] += w_far / w_all;
      }
    }
  }
  // -1 where nothing was measured
  double recall(int layer, Kind kind) const {
    return weight_[layer * 3 + kind] > 0 ? sum_[layer * 3 + kind] / weight_[layer * 3 + kind] : -1;
  }

 private:
  const Profile& p_;
  const ModelConfig& c_;
  ChunkSetting cand_;
  RecallSettings s_;
  const ProbeWindow& w_;
  std::vector<double> sum_ = std::vector<double>(3 * c_.n_layer), weight_ = sum_;  // [n_layer, Kind]
};

// Several observers on one run.
class All : public AttentionObserver {
 public:
  explicit All(std::vector<AttentionObserver*> all) : all_(std::move(all)) {}
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override {
    for (AttentionObserver* o : all_) o->on_queries(layer, p0, n, q, cache);
  }

 private:
  std::vector<AttentionObserver*> all_;
};

// The meter equals its plain definition for one and for two chunks (float against double sums: a
// near tie could flip one key, hence the tolerance); every chunk scores exactly what full attention
// scores (recall 1 whatever the weights); a single chunk finds less on a random model.
TEST(ChunkChoice, MeterEqualsItsPlainDefinition) {
  test::TinyLlamaSpec spec;
  spec.n_ctx = 1024;
  spec.n_embd = 64;  // head_dim 16: 8 chunks
  const std::string path = test::temp_dir() + "/tiny.gguf";
  test::write_file(path, test::tiny_llama_gguf(spec).bytes());
  auto m = load_model(path);
  const Profile p = synthetic_profile(*m, 2, 3);
  const int F = p.n_fc;
  RecallSettings s;
  s.window = 32;
  s.pick = 16;
  const ChunkSetting one{FcRank::Agreement, 1}, two{FcRank::Magnitude, 2};
  RecallMeter meter(p, m->config, {{FcRank::Agreement, F}, one, two}, s);
  std::vector<int32_t> tokens(1024);
  for (int i = 0; i < 1024; ++i) tokens[i] = 3 + (i * 37) % 250;
  const auto probes = probe_windows({tokens}, s);
  ASSERT_EQ(probes.size(), 1u);
  SessionOptions so;
  so.n_ctx = 1024;
  so.cache.types = {DType::F32, DType::F32};
  Session session(*m, so);
  PlainRecall plain_one(p, m->config, one, s, probes[0]), plain_two(p, m->config, two, s, probes[0]);
  All all({&meter, &plain_one, &plain_two});
  session.set_observer(&all);
  meter.start_window(probes[0]);
  session.prefill(probes[0].tokens);
  const auto r = meter.recalls();
  int lookalike_layers = 0;
  for (int l = 0; l < m->config.n_layer; ++l) {
    ASSERT_EQ(r[l].size(), 3u);
    EXPECT_NEAR(r[l][0].copies, 1.0, 1e-9) << l;
    EXPECT_NEAR(r[l][0].text, 1.0, 1e-9) << l;
    EXPECT_LT(r[l][1].text, 1.0) << l;
    if (r[l][0].lookalikes >= 0) {
      EXPECT_NEAR(r[l][0].lookalikes, 1.0, 1e-9) << l;
    }
    lookalike_layers += r[l][0].lookalikes >= 0;
    for (auto kind : {PlainRecall::kText, PlainRecall::kCopies, PlainRecall::kLookalikes}) {
      auto of = [&](const CandidateRecall& c) {
        return kind == PlainRecall::kText ? c.text : kind == PlainRecall::kCopies ? c.copies : c.lookalikes;
      };
      EXPECT_NEAR(of(r[l][1]), plain_one.recall(l, kind), 1e-4) << l << kind;
      EXPECT_NEAR(of(r[l][2]), plain_two.recall(l, kind), 1e-4) << l << kind;
    }
  }
  EXPECT_GT(lookalike_layers, 0) << "full attention's top key lay in no record in any layer";
}

// A profile with a choice: two layers of 4 query heads on 2 KV heads, 16 chunks.
Profile chosen_profile() {
  Profile p;
  p.model = {"llama", 2, 4, 2, 32, 32, 100, "normal", "0123456789abcdef"};
  p.n_fc = 16;
  p.n_tip = 4;
  p.top_k = 8;
  p.queries = 1;
  p.calibration_text = "test";
  p.mean_ca.resize(2 * 4 * 16);
  p.channel_qk.resize(2 * 4 * 32);
  for (size_t i = 0; i < p.mean_ca.size(); ++i) p.mean_ca[i] = (float)((i * 7) % 16) / 16;
  for (size_t i = 0; i < p.channel_qk.size(); ++i) p.channel_qk[i] = (float)((i * 5) % 32);
  ChunkChoice c;
  c.layers = {{FcRank::Agreement, 0}, {FcRank::Magnitude, 8}};
  c.measured = {{}, {recall(FcRank::Agreement, 4, 0.5), recall(FcRank::Magnitude, 8, 0.875, 0.9)}};
  p.choice = c;
  return p;
}

TEST(ChunkChoice, TheProfileRecordsItAndOldProfilesLoad) {
  const Profile p = chosen_profile();
  EXPECT_EQ(p.setting(1, FcRank::Auto, 0), (ChunkSetting{FcRank::Magnitude, 8}));
  EXPECT_EQ(p.setting(0, FcRank::Auto, 0), (ChunkSetting{FcRank::Agreement, 4})) << "a layer not measured";
  EXPECT_EQ(p.setting(1, FcRank::Agreement, 0), (ChunkSetting{FcRank::Agreement, 4})) << "the paper's ranking, n_tip";
  EXPECT_EQ(p.setting(1, FcRank::Auto, 6), (ChunkSetting{FcRank::Magnitude, 6})) << "--fcs keeps the chosen ranking";
  const std::string file = test::temp_dir() + "/chosen.profile.json";
  save_profile(p, file);
  const Profile back = load_profile(file);
  ASSERT_TRUE(back.choice);
  EXPECT_EQ(back.choice->layers, p.choice->layers);
  ASSERT_EQ(back.choice->measured[1].size(), 2u);
  EXPECT_DOUBLE_EQ(back.choice->measured[1][1].copies, 0.875);
  EXPECT_DOUBLE_EQ(back.choice->measured[1][1].lookalikes, 0.9);
  EXPECT_EQ(back.choice->measured[1][0].lookalikes, -1) << "not measured: not written, read back as such";
  EXPECT_EQ(back.choice->settings, p.choice->settings);
  Profile old = p;
  old.choice.reset();
  save_profile(old, file);
  EXPECT_FALSE(load_profile(file).choice);
  EXPECT_EQ(load_profile(file).setting(1, FcRank::Auto, 0), (ChunkSetting{FcRank::Agreement, 4}));
  EXPECT_NE(choice_warning(old).find("no far-recall check"), std::string::npos);
}

TEST(ChunkChoice, ACorruptChoiceIsAClearError) {
  const std::string file = test::temp_dir() + "/bad.profile.json";
  save_profile(chosen_profile(), file);
  const std::string good = test::read_file(file);
  for (const auto& [from, to, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"fc_rank\": \"magnitude\"", "\"fc_rank\": \"loudest\"", "neither 'agreement' nor 'magnitude'"},
           {"\"copies\": 0.875", "\"copies\": 7.5", "'copies' must lie in [0, 1]"},
           {"\"lookalikes\": 0.9", "\"lookalikes\": -0.5", "'lookalikes' must lie in [0, 1]"},
           {"\"fcs\": 8", "\"fcs\": 99", "'fcs' = 99 is out of range"},
           {"\"layer\": 1", "\"layer\": 5", "'layer' = 5 is out of range"},
           {"\"pick\": 64", "\"pick\": 0", "'pick' = 0 is out of range"},
           {"\"fcs\": 8", "\"fcs\": 6", "layer 1's choice is none of its candidates"}}) {
    std::string bad = good;
    const size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    test::write_file(file, bad.replace(at, from.size(), to));
    const std::string msg = test::error_message([&] { load_profile(file); });
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
  }
}

TEST(ChunkChoice, APolicyWithDefaultsDecodesWithTheChoiceAndWarnsBelowTheTarget) {
  const Profile p = chosen_profile();
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.n_rot = 32;
  FasaOptions o;
  o.dense_layers = {};
  const FasaPolicy policy(p, c, o);
  EXPECT_EQ(policy.scored_dims(1, 0).size(), 16u) << "8 chunks by magnitude";
  EXPECT_EQ(policy.scored_dims(0, 0).size(), 8u) << "n_tip by agreement";
  const FcLayout fcs(c);
  std::set<int> want;
  for (int f : p.dominant_fcs(1, 0, 8, FcSharing::Group, FcRank::Magnitude))
    for (int d : fcs.dims(f)) want.insert(d);
  const KeyLayout k = policy.key_layout(1, 0);
  EXPECT_EQ(std::set<int>(k.perm.begin(), k.perm.begin() + k.n_dom), want);
  EXPECT_NE(policy.summary().find("the profile's choice"), std::string::npos) << policy.summary();
  const std::string w = choice_warning(p);
  EXPECT_NE(w.find("layers 1 (88%)"), std::string::npos) << w;
  EXPECT_NE(w.find("--fcs 12"), std::string::npos) << w;
}

}  // namespace
}  // namespace fasa
