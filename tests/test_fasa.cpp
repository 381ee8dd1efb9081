// FASA core: chunk layout against the RoPE kernel, calibration finding planted dominant chunks,
// profiles (round trip, corruption, mismatch), and FASA decoding (budget >= context equals dense;
// the selection equals a brute-force TIP reference).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "calib/agreement.h"
#include "calib/calibrate.h"
#include "calib/fc_layout.h"
#include "model/sampler.h"
#include "model/session.h"
#include "ops/elementwise.h"
#include "sparse/doublesparse.h"
#include "sparse/baselines.h"
#include "sparse/fasa.h"
#include "test_util.h"
#include "fasa/error.h"
#include <nlohmann/json.hpp>

namespace fasa {
namespace {

// Partial score on `dims` between a query at position pq and a key at pk, both rotated by RoPE.
double chunk_score(RopeLayout layout, int D, int64_t pq, int64_t pk, const std::vector<float>& q0,
                   const std::vector<float>& k0, std::array<int, 2> dims) {
  ModelConfig c;
  c.n_rot = D;
  c.rope_base = 10000;
  auto inv = c.rope_inv_freq();
  std::vector<float> q = q0, k = k0, cq(D), ck(D);
  rope_cos_sin(inv.data(), D / 2, pq, cq.data());
  rope_cos_sin(inv.data(), D / 2, pk, ck.data());
  rope(q.data(), 1, D, D, layout, cq.data());
  rope(k.data(), 1, D, D, layout, ck.data());
  return (double)q[dims[0]] * k[dims[0]] + (double)q[dims[1]] * k[dims[1]];
}

TEST(FcLayout, ChunkScoreDependsOnlyOnTheOffset) {
  const int D = 32;
  auto q0 = test::random_floats(D, 1), k0 = test::random_floats(D, 2);
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    const FcLayout fcs(D, D, layout);
    ASSERT_EQ(fcs.n_fc(), D / 2);
    for (int fc = 0; fc < fcs.n_fc(); ++fc) {
      const auto d = fcs.dims(fc);
      EXPECT_NEAR(chunk_score(layout, D, 20, 5, q0, k0, d), chunk_score(layout, D, 915, 900, q0, k0, d), 1e-3)
          << rope_layout_name(layout) << " chunk " << fc;
    }
  }
  // Pairing (2i, 2i+1) on a half-split (NEOX) model mixes two frequencies: position leaks in.
  const FcLayout wrong(D, D, RopeLayout::Normal);
  double worst = 0;
  for (int fc = 1; fc < D / 2; ++fc) {
    const auto d = wrong.dims(fc);
    worst = std::max(worst, std::fabs(chunk_score(RopeLayout::Neox, D, 20, 5, q0, k0, d) -
                                      chunk_score(RopeLayout::Neox, D, 915, 900, q0, k0, d)));
  }
  EXPECT_GT(worst, 1e-2);
}

TEST(FcLayout, PartialRotaryDimsFormExtraChunks) {
  const FcLayout fcs(16, 8, RopeLayout::Neox);
  EXPECT_EQ(fcs.n_fc(), 8);
  EXPECT_EQ(fcs.dims(1), (std::array<int, 2>{1, 5}));
  EXPECT_EQ(fcs.dims(4), (std::array<int, 2>{8, 9}));
  EXPECT_EQ(fcs.dims(7), (std::array<int, 2>{14, 15}));
  EXPECT_EQ(FcLayout(16, 16, RopeLayout::Normal).dims(3), (std::array<int, 2>{6, 7}));
}

// The calibration tests' shape: one layer, two query heads sharing one KV head of 16 dims.
ModelConfig one_layer_two_heads(RopeLayout layout) {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 16;
  c.n_rot = 16;
  c.rope_layout = layout;
  return c;
}

// A synthetic head whose keys match the query only in planted chunks; the other chunks are noise.
TEST(Calibration, FindsPlantedDominantChunks) {
  const ModelConfig c = one_layer_two_heads(RopeLayout::Neox);
  const FcLayout fcs(c);
  const std::set<int> planted = {2, 5};
  const int T = 200;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  KvCache cache(1, 1, 16, T);
  std::vector<float> content(T);  // how well each key matches
  for (auto& x : content) x = nd(rng);
  std::vector<float> q(2 * 16);   // [2 heads, 16]
  for (int h = 0; h < 2; ++h)
    for (int f = 0; f < fcs.n_fc(); ++f)
      for (int d : fcs.dims(f)) q[h * 16 + d] = planted.count(f) ? 1.0f : 0.3f;
  for (int j = 0; j < T; ++j) {
    std::vector<float> k(16), v(16, 0.0f);
    for (int f = 0; f < fcs.n_fc(); ++f)
      for (int d : fcs.dims(f)) k[d] = planted.count(f) ? 3.0f * content[j] + 0.2f * nd(rng) : nd(rng);
    cache.store(0, 0, j, k.data(), v.data());
  }
  AgreementMeter m(c, 10, 0);
  // Queries at the last 20 positions (the meter reads keys 0..p from the cache).
  std::vector<float> qs;
  for (int t = 0; t < 20; ++t) qs.insert(qs.end(), q.begin(), q.end());
  m.on_queries(0, T - 20, 20, qs.data(), cache);
  EXPECT_EQ(m.fc_queries(), 20);
  Profile p;
  p.model.n_layer = 1;
  p.model.n_head = 2;
  p.model.n_head_kv = 1;
  p.n_fc = fcs.n_fc();
  p.mean_ca = m.mean_fc_ca();
  for (int h = 0; h < 2; ++h) {
    auto top = p.dominant_fcs(0, h, 2, FcSharing::Head, FcRank::Agreement);
    EXPECT_EQ(std::set<int>(top.begin(), top.end()), planted) << "head " << h;
    for (int f = 0; f < p.n_fc; ++f) {
      if (!planted.count(f)) {
        EXPECT_LT(p.ca(0, h, f), p.ca(0, h, 2));
      }
    }
  }
}

// The meter's mean CA equals a plain computation (full sorts, ties to the lower index) on random keys,
// some rows repeated so that scores tie, over every `stride`-th query from min_pos.
TEST(Calibration, AgreementEqualsAPlainReference) {
  const ModelConfig c = one_layer_two_heads(RopeLayout::Normal);
  const FcLayout fcs(c);
  const int T = 150, K = 10, D = 16, F = fcs.n_fc(), min_pos = 100, stride = 3;
  KvCache cache(1, 1, D, T);
  const std::vector<float> keys = test::random_floats((size_t)T * D, 11), v(D, 0.0f);
  for (int j = 0; j < T; ++j) cache.store(0, 0, j, &keys[(size_t)(j % 7 == 3 ? j / 2 : j) * D], v.data());
  const std::vector<float> q = test::random_floats((size_t)T * 2 * D, 12);  // [T, 2 heads, D]
  AgreementMeter meter(c, K, min_pos, stride);
  meter.on_queries(0, 0, T, q.data(), cache);

  std::vector<double> want((size_t)2 * F, 0.0);
  int64_t counted = 0;
  auto top_k = [&](const std::vector<float>& s) {
    std::vector<int> idx(s.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
    return std::set<int>(idx.begin(), idx.begin() + K);
  };
  const KvHeadView kv = cache.view(0, 0, T);
  for (int p = min_pos; p < T; p += stride) {
    ++counted;
    for (int h = 0; h < 2; ++h) {
      const float* qh = &q[((size_t)p * 2 + h) * D];
      std::vector<float> full(p + 1), k(D);
      std::vector<std::vector<float>> part(F, std::vector<float>(p + 1));
      for (int j = 0; j <= p; ++j) {
        kv_load(kv.k_rest_row(j), kv.k_type, D, k.data());
        float a = 0;
        for (int f = 0; f < F; ++f) {
          const auto d = fcs.dims(f);
          part[f][j] = qh[d[0]] * k[d[0]] + qh[d[1]] * k[d[1]];
          a += part[f][j];
        }
        full[j] = a;
      }
      const std::set<int> best = top_k(full);
      for (int f = 0; f < F; ++f) {
        int hits = 0;
        for (int j : top_k(part[f])) hits += best.count(j);
        want[(size_t)h * F + f] += (double)hits / K;
      }
    }
  }
  EXPECT_EQ(meter.fc_queries(), counted);
  const std::vector<float> got = meter.mean_fc_ca();
  for (int i = 0; i < 2 * F; ++i) EXPECT_NEAR(got[i], want[i] / counted, 1e-6) << "head " << i / F << " chunk " << i % F;
  // DoubleSparse's channel statistic: mean |q_c| of the measured queries times mean |k_c| of every key.
  std::vector<double> k_abs(D, 0.0);
  std::vector<float> row(D);
  for (int j = 0; j < T; ++j) {
    kv_load(kv.k_rest_row(j), kv.k_type, D, row.data());
    for (int d = 0; d < D; ++d) k_abs[d] += std::fabs(row[d]) / T;
  }
  const std::vector<float> qk = meter.channel_qk();
  ASSERT_EQ(qk.size(), (size_t)2 * D);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < D; ++d) {
      double q_abs = 0;
      for (int p = min_pos; p < T; p += stride) q_abs += std::fabs(q[((size_t)p * 2 + h) * D + d]) / counted;
      EXPECT_NEAR(qk[(size_t)h * D + d], q_abs * k_abs[d], 1e-5) << "head " << h << " channel " << d;
    }
}

TEST(Calibration, TokenWindowsRepeatBos) {
  std::vector<int32_t> t = {1, 10, 11, 12, 13, 14};
  auto w = token_windows(t, 4, 1);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], (std::vector<int32_t>{1, 10, 11, 12}));
  EXPECT_EQ(w[1], (std::vector<int32_t>{1, 13, 14}));
  EXPECT_THROW(token_windows(t, 1, 1), Error);  // a BOS alone fills a 1-token window: no progress
}

// A quick profile of a model (the bundled one unless named) from a short text, made once per model.
const std::string& quick_profile(const std::string& model_path = FASA_BUNDLED_MODEL) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(model_path); it != made.end()) return it->second;
  auto m = load_model(model_path);
  CalibrationOptions o;
  o.top_k = 16;
  o.min_pos = 32;
  o.n_ctx = 160;
  std::string text = "In the beginning God created the heaven and the earth. And the earth was without form, and "
                     "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
                     "of the waters. And God said, Let there be light: and there was light. And God saw the light, "
                     "that it was good: and God divided the light from the darkness.";
  Profile p = calibrate(*m, text + "\n" + text, "genesis", o);
  std::string out = test::temp_dir() + "/profile" + std::to_string(made.size()) + ".json";
  save_profile(p, out);
  return made[model_path] = out;
}
const std::string& bundled_profile() { return quick_profile(); }

// --fc-alloc adaptive: the same chunks in all, fewer to heads whose agreement sits in a few chunks.
TEST(Profile, AdaptiveChunkCountsFollowConcentration) {
  Profile p;
  p.model.n_layer = 3;
  p.model.n_head = 4;
  p.model.n_head_kv = 2;
  p.n_fc = 16;
  p.mean_ca.assign(3 * 4 * 16, 0.1f);  // flat everywhere ...
  auto set = [&](int l, int h, int f, float v) { p.mean_ca[((size_t)l * 4 + h) * 16 + f] = v; };
  for (int h : {0, 1}) set(1, h, 5, 0.9f), set(1, h, 9, 0.6f);  // ... but layer 1's first group: two chunks
  const std::vector<char> sparse = {0, 1, 1};  // layer 0 dense
  const std::vector<int> group = adaptive_chunk_counts(p, 4, FcSharing::Group, FcRank::Agreement, sparse);
  ASSERT_EQ(group.size(), 12u);
  for (int h = 0; h < 4; ++h) EXPECT_EQ(group[h], 0) << "dense layer";
  int total = 0;
  for (int i = 4; i < 12; ++i) {
    total += group[i];
    EXPECT_GE(group[i], 1);
    EXPECT_EQ(group[i], group[i ^ 1]) << "a group shares one count";
  }
  EXPECT_EQ(total, 4 * 8);  // 4 on average over the 8 sparse heads
  EXPECT_LT(group[4], 4);   // concentrated: fewer
  for (int i = 6; i < 12; ++i) EXPECT_GT(group[i], 4) << i;
  // Per head: only heads 0 and 1 of layer 1 are concentrated.
  const std::vector<int> head = adaptive_chunk_counts(p, 4, FcSharing::Head, FcRank::Agreement, sparse);
  EXPECT_LT(head[4], 4);
  EXPECT_LT(head[5], 4);
  EXPECT_GT(head[6], 4);
  // Uniform agreement everywhere: uniform counts.
  p.mean_ca.assign(p.mean_ca.size(), 0.2f);
  for (int i = 4; i < 12; ++i) EXPECT_EQ(adaptive_chunk_counts(p, 4, FcSharing::Group, FcRank::Agreement, sparse)[i], 4);
}

// --fc-rank magnitude: chunks ranked by the channel statistic summed over each chunk's two dims
// (which dims pair up follows the RoPE layout), per head or as the group's mean; adaptive counts follow it.
TEST(Profile, MagnitudeRankingSumsEachChunksTwoChannels) {
  Profile p;
  p.model.n_layer = 1;
  p.model.n_head = 2;
  p.model.n_head_kv = 1;
  p.model.head_dim = p.model.n_rot = 8;
  p.n_fc = 4;
  p.mean_ca = {0.9f, 0.8f, 0.7f, 0.6f, 0.9f, 0.8f, 0.7f, 0.6f};  // agreement ranks 0, 1, 2, 3 for both heads
  EXPECT_NE(test::error_message([&] { p.dominant_fcs(0, 0, 2, FcSharing::Head, FcRank::Magnitude); }).find("no channel statistics"),
            std::string::npos);
  // Head 0's largest dims are 6 and 1; head 1's 2 and 3.
  p.channel_qk = {0.1f, 2.0f, 0.1f, 0.1f, 0.1f, 0.1f, 3.0f, 0.1f,   // head 0
                  0.1f, 0.1f, 1.0f, 1.5f, 0.1f, 0.1f, 0.1f, 0.1f};  // head 1
  p.model.rope_layout = "normal";                                   // chunk f = dims (2f, 2f+1)
  EXPECT_EQ(p.dominant_fcs(0, 0, 2, FcSharing::Head, FcRank::Magnitude), (std::vector<int>{3, 0}));
  EXPECT_EQ(p.dominant_fcs(0, 1, 2, FcSharing::Head, FcRank::Magnitude), (std::vector<int>{1, 0}));
  EXPECT_EQ(p.dominant_fcs(0, 1, 2, FcSharing::Group, FcRank::Magnitude), (std::vector<int>{3, 1}));  // means 1.15, 1.35, 0.2, 1.65
  EXPECT_FLOAT_EQ(p.chunk_scores(0, 1, FcSharing::Group, FcRank::Magnitude)[1], (0.2f + 2.5f) / 2);
  EXPECT_EQ(p.dominant_fcs(0, 0, 2, FcSharing::Head, FcRank::Agreement), (std::vector<int>{0, 1}));  // agreement unchanged
  p.model.rope_layout = "neox";  // chunk f = dims (f, f+4)
  EXPECT_EQ(p.dominant_fcs(0, 0, 1, FcSharing::Head, FcRank::Magnitude), (std::vector<int>{2}));  // dims 2, 6
  EXPECT_EQ(p.dominant_fcs(0, 1, 1, FcSharing::Head, FcRank::Magnitude), (std::vector<int>{3}));  // dims 3, 7
  // Partial rotary (neox, 4 of 8 dims rotated): chunks (0,2), (1,3), then the unrotated pairs (4,5), (6,7).
  p.model.n_rot = 4;
  EXPECT_EQ(p.dominant_fcs(0, 0, 2, FcSharing::Head, FcRank::Magnitude), (std::vector<int>{3, 1}));  // 3.1, 2.1
  p.model.n_rot = 8;
  // Adaptive counts from magnitude shares: head 0 flat, head 1 holds 81 % in one chunk.
  p.model.rope_layout = "normal";
  std::fill(p.channel_qk.begin(), p.channel_qk.begin() + 8, 1.0f);
  const std::vector<int> counts = adaptive_chunk_counts(p, 2, FcSharing::Head, FcRank::Magnitude, {1});
  EXPECT_LT(counts[1], counts[0]);
  EXPECT_EQ(counts[0] + counts[1], 4);
}

// The setting reaches the policy: on the bundled profile the two rankings choose other chunks, and the
// K_dom plane holds the dims of the magnitude ranking's chunks.
TEST(Fasa, RankSettingChoosesThePlanesChunks) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile p = load_profile(bundled_profile());
  const FcLayout fcs(m->config);
  PolicyOptions o;
  o.attn = "fasa";
  const auto agreement = make_fasa_policy_from(p, o, *m);
  o.fc_rank = FcRank::Magnitude;
  const auto magnitude = make_fasa_policy_from(p, o, *m);
  const int group = m->config.n_head / m->config.n_head_kv;
  int differ = 0;
  for (int l = 1; l < m->config.n_layer; ++l)
    for (int kvh = 0; kvh < m->config.n_head_kv; ++kvh) {
      const KeyLayout k = magnitude->key_layout(l, kvh);
      std::set<int> want;
      for (int f : p.dominant_fcs(l, kvh * group, p.n_tip, FcSharing::Group, FcRank::Magnitude))
        for (int d : fcs.dims(f)) want.insert(d);
      EXPECT_EQ(std::set<int>(k.perm.begin(), k.perm.begin() + k.n_dom), want) << l << " " << kvh;
      differ += k.perm != agreement->key_layout(l, kvh).perm;
    }
  EXPECT_GT(differ, 0);
}

TEST(Fasa, AdaptiveAllocationReadsTheSameKdomBytes) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile p = load_profile(bundled_profile());
  FasaOptions o;
  const FasaPolicy uniform(p, m->config, o);
  o.adaptive = true;
  const FasaPolicy adaptive(p, m->config, o);
  EXPECT_DOUBLE_EQ(adaptive.kdom_share(), uniform.kdom_share());
}

TEST(Profile, RoundTripAndMatch) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile p = load_profile(bundled_profile());
  EXPECT_EQ(p.model, fingerprint(*m));
  EXPECT_EQ(p.n_fc, 32);
  EXPECT_EQ(p.n_tip, 8);
  EXPECT_GT(p.queries, 0);
  const std::string again = test::temp_dir() + "/again.json";
  save_profile(p, again);
  const Profile q = load_profile(again);
  EXPECT_EQ(q.mean_ca, p.mean_ca);
  EXPECT_EQ(q.model, p.model);
  EXPECT_NO_THROW(check_profile_matches(p, *m, bundled_profile()));
  for (int l = 0; l < m->config.n_layer; ++l)
    for (int h = 0; h < m->config.n_head; ++h) {
      auto f = p.dominant_fcs(l, h, 8, FcSharing::Head, FcRank::Agreement);
      EXPECT_EQ(std::set<int>(f.begin(), f.end()).size(), 8u);
      for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(p.ca(l, h, f[i - 1]), p.ca(l, h, f[i]));
    }
}

TEST(Profile, AnotherModelIsAClearError) {
  FASA_REQUIRE_SHARED();
  const std::string tiny = test::shared_dir() + "/models/kjv-tiny/kjv-tiny-";
  const Profile p = load_profile(quick_profile(tiny + "f16.gguf"));
  auto same_shape = load_model(tiny + "f32.gguf");  // the same model, other weight bytes
  auto bundled = load_model(FASA_BUNDLED_MODEL);
  auto other = load_model(test::shared_dir() + "/models/qwen2-rand/qwen2-rand-f32.gguf");
  for (const Model* m : {same_shape.get(), bundled.get(), other.get()}) {
    try {
      check_profile_matches(p, *m, "P.json");
      ADD_FAILURE() << "accepted a profile of another model: " << m->path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("P.json: profile was calibrated for another model"), std::string::npos);
      // Same shape, other weights: the error says to calibrate for this file.
      const bool shape_matches = m == same_shape.get();
      EXPECT_EQ(std::string(e.what()).find("fasa calibrate -m " + m->path) != std::string::npos, shape_matches) << e.what();
    }
  }
}

TEST(Profile, CorruptProfilesAreClearErrors) {
  const std::string good = test::read_file(bundled_profile());
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  auto first_value = [&](const std::string& key, const std::string& to) {  // of the first entry's row
    std::string s = good;
    const size_t open = s.find("[", s.find(key)) + 1, comma = s.find(",", open);
    return s.replace(open, comma - open, to);
  };
  struct C { std::string name, text, expect; };
  const std::vector<C> cases = {
      {"empty", "", "not valid JSON"},
      {"truncated", good.substr(0, good.size() / 2), "not valid JSON"},
      {"not_profile", "{\"format\": \"other\"}", "not a fasa profile"},
      {"format_not_a_string", "{\"format\": 5}", "unexpected JSON content"},
      {"version", edit("\"version\": 1", "\"version\": 7"), "version 7 is not supported"},
      {"missing_heads", edit("\"heads\"", "\"sdaeh\""), "'heads' must list 16"},
      {"bad_n_fc", edit("\"n_fc\": 32", "\"n_fc\": 31"), "n_fc 31 does not match"},
      {"huge_layers", edit("\"n_layer\": 4", "\"n_layer\": 99999999"), "out of range"},
      {"string_for_number", edit("\"n_tip\": 8", "\"n_tip\": \"8\""), "not an integer"},
      {"float_for_integer", edit("\"n_tip\": 8", "\"n_tip\": 2e82"), "not an integer"},  // found by fuzz_profile
      {"ca_row_too_long", edit("\"ca\": [", "\"ca\": [0.5, "), "'ca' must hold n_fc values"},
      {"ca_out_of_range", first_value("\"ca\"", "7.5"), "must lie in [0, 1]"},
      {"ca_negative", first_value("\"ca\"", "-0.5"), "must lie in [0, 1]"},
      {"channels_in_some_entries", edit("\"channels\": [", "\"channelz\": ["), "'channels' must be in every"},
      {"channels_row_too_long", edit("\"channels\": [", "\"channels\": [0.5, "), "'channels' must hold head_dim values"},
      {"channels_negative", first_value("\"channels\"", "-0.5"), "must be finite and >= 0"},
  };
  for (const auto& c : cases) {
    const std::string path = test::temp_dir() + "/" + c.name + ".json";
    test::write_file(path, c.text);
    try {
      load_profile(path);
      ADD_FAILURE() << c.name << " loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    }
  }
}

std::shared_ptr<FasaPolicy> fasa_policy(const Model& m, Budget b, FcSharing sh, std::vector<int> dense = {0}) {
  FasaOptions o;
  o.budget = b;
  o.sharing = sh;
  o.dense_layers = std::move(dense);
  return std::make_shared<FasaPolicy>(load_profile(quick_profile(m.path)), m.config, o);
}

std::vector<int32_t> greedy(const Model& m, std::shared_ptr<AttentionPolicy> p, const std::vector<int32_t>& prompt, int n,
                            std::vector<float>* first_logits = nullptr, KvTypes kv_types = {}) {
  SessionOptions so;
  so.cache.types = kv_types;
  Session s(m, so, std::move(p));
  auto logits = s.prefill(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    logits = s.decode(out.back());
    if (i == 0 && first_logits) first_logits->assign(logits.begin(), logits.end());
  }
  return out;
}

TEST(FasaDecoding, BudgetAtLeastContextEqualsDenseInEveryLayer) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  auto prompt = m->tokenizer.encode("And God called the light Day, and the darkness he called Night.", true);
  std::vector<float> full_logits, fasa_logits;
  const auto full = greedy(*m, std::make_shared<FullAttention>(), prompt, 16, &full_logits);
  for (FcSharing sh : {FcSharing::Group, FcSharing::Head}) {
    const auto got = greedy(*m, fasa_policy(*m, {100000, false}, sh, {}), prompt, 16, &fasa_logits);
    EXPECT_EQ(got, full);
    // every row attended, the keys' dot products summed as K_dom + K_rest parts: float rounding only,
    // carried through 4 layers and 16 steps (7.4e-5 measured on the bundled model; 1e-3 is a wrong row)
    EXPECT_LE(test::normalized_error(fasa_logits.data(), full_logits.data(), full_logits.size()), 2e-4);
  }
  // A budget of 1.0 (the whole context) too; and a small budget does change the result.
  const auto whole = greedy(*m, fasa_policy(*m, {1.0, true}, FcSharing::Group, {}), prompt, 16, &fasa_logits);
  EXPECT_EQ(whole, full);
  greedy(*m, fasa_policy(*m, {4, false}, FcSharing::Group, {}), prompt, 1, &fasa_logits);
  EXPECT_GT(test::normalized_error(fasa_logits.data(), full_logits.data(), full_logits.size()), 1e-3);
}

// Q8_0 keys: FASA's cache quantizes K_dom and K_rest in their own blocks, dense attention's the whole
// key row, so the two round keys differently; at budget >= context they agree within that rounding.
// The int8 TIP copy only ranks, so with every row attended it changes nothing.
TEST(FasaDecoding, BudgetAtLeastContextOnQ8KeysIsDenseWithinRounding) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  auto prompt = m->tokenizer.encode("And God called the light Day, and the darkness he called Night.", true);
  std::vector<float> full_logits, fasa_logits, tip_logits, f16_logits;
  const auto full = greedy(*m, std::make_shared<FullAttention>(), prompt, 16, &full_logits, DType::Q8_0);
  greedy(*m, std::make_shared<FullAttention>(), prompt, 1, &f16_logits);
  const double q8_vs_f16 = test::normalized_error(full_logits.data(), f16_logits.data(), full_logits.size());
  EXPECT_GT(q8_vs_f16, 0.0);
  EXPECT_LE(q8_vs_f16, 5e-2);
  const auto got = greedy(*m, fasa_policy(*m, {100000, false}, FcSharing::Group, {}), prompt, 16, &fasa_logits, DType::Q8_0);
  EXPECT_EQ(got, full);
  // Two Q8_0 roundings of the same keys differ by about as much as either differs from F16: 9.2e-3
  // measured against 1.08e-2 for Q8_0 against F16 itself (run12; run9 had 4.4e-3 against 2.3e-2)
  EXPECT_LE(test::normalized_error(fasa_logits.data(), full_logits.data(), full_logits.size()), q8_vs_f16);
  greedy(*m, fasa_policy(*m, {100000, false}, FcSharing::Group, {}), prompt, 1, &tip_logits,
         KvTypes(DType::F16, DType::F16, true));
  EXPECT_LE(test::normalized_error(tip_logits.data(), f16_logits.data(), f16_logits.size()), 2e-4);
}

TEST(FasaDecoding, GoldenPromptsWithHugeBudgetMatchFullAttention) {
  FASA_REQUIRE_SHARED();
  auto m = load_model(test::shared_dir() + "/models/kjv-tiny/kjv-tiny-f16.gguf");
  auto j = nlohmann::json::parse(test::read_file(test::shared_dir() + "/models/kjv-tiny/golden/golden.json"));
  for (auto& c : j["cases"]) {
    if (c["variant"] != "f16") continue;
    const auto prompt = c["tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(*m, fasa_policy(*m, {100000, false}, FcSharing::Group), prompt, 24),
              c["greedy_next_24"].get<std::vector<int32_t>>());
  }
}

// The policy's choice equals top-N of S_j = sum over the head's chunks of q.k on those dims,
// computed here from model-order keys, beside the forced rows: 2 sink and 3 recent in a budget of 20;
// asked for 4 and 16 in a budget of 12, at most half of it: 4 and 2, TIP choosing the other 6.
TEST(FasaDecoding, SelectionEqualsBruteForceTip) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile prof = load_profile(bundled_profile());
  const FcLayout fcs(m->config);
  const int D = m->config.head_dim, T = 300;
  struct Forced {
    int budget, sink, recent, kept_sink, kept_recent;
  };
  for (auto [sh, rank] : {std::pair{FcSharing::Group, FcRank::Agreement}, std::pair{FcSharing::Head, FcRank::Agreement},
                           std::pair{FcSharing::Group, FcRank::Magnitude}})
  for (Forced forced : {Forced{20, 2, 3, 2, 3}, Forced{12, 4, 16, 4, 2}}) {
    FasaOptions o;
    o.budget = Budget::count(forced.budget);
    o.sharing = sh;
    o.rank = rank;
    o.sink = forced.sink;
    o.recent = forced.recent;
    FasaPolicy policy(prof, m->config, o);
    const int layer = 3, head = 1, kvh = head / 2;
    const KeyLayout layout = policy.key_layout(layer, kvh);
    EXPECT_EQ(layout.n_dom, sh == FcSharing::Group ? 16 : (int)layout.n_dom);
    EXPECT_GE(layout.n_dom, 16);
    if (sh == FcSharing::Group) {
      EXPECT_DOUBLE_EQ(policy.kdom_share(), 0.25);  // 8 of 32 chunks
    } else {
      EXPECT_GE(policy.kdom_share(), 0.25);  // the union of the group's per-head sets
    }
    KvCache cache(1, 1, D, T, {layout}, DType::F32);  // the reference scores float keys
    auto keys = test::random_floats((size_t)T * D, 5), vals = test::random_floats((size_t)T * D, 6);
    for (int j = 0; j < T; ++j) cache.store(0, 0, j, &keys[j * D], &vals[j * D]);
    auto q = test::random_floats(D, 7);
    std::vector<float> qp(D);
    cache.permute_query(0, 0, q.data(), qp.data());
    std::vector<int32_t> rows;
    ASSERT_TRUE(select_one(policy, {layer, head, kvh, T - 1, qp.data()}, cache.view(0, 0, T), rows));
    // Reference.
    const auto chunks = prof.dominant_fcs(layer, head, prof.n_tip, sh, rank);
    std::vector<std::pair<float, int>> s;
    for (int j = forced.kept_sink; j < T - forced.kept_recent; ++j) {
      float v = 0;
      for (int f : chunks)
        for (int d : fcs.dims(f)) v += q[d] * keys[j * D + d];
      s.push_back({-v, j});
    }
    std::sort(s.begin(), s.end());
    std::set<int32_t> want;
    for (int j = 0; j < forced.kept_sink; ++j) want.insert(j);
    for (int j = T - forced.kept_recent; j < T; ++j) want.insert(j);
    for (int i = 0; i < forced.budget - forced.kept_sink - forced.kept_recent; ++i) want.insert(s[i].second);
    EXPECT_EQ(std::set<int32_t>(rows.begin(), rows.end()), want) << name_of(sh) << " " << name_of(rank) << " budget " << forced.budget;
    EXPECT_EQ(rows.size(), (size_t)forced.budget);
  }
}

// fasa's defaults force the first token and the last 15 in (the summary says so); --sink 0 --recent 0
// is the paper's FASA, and stream keeps its 8 sinks.
TEST(FasaDecoding, DefaultsForceTheFirstTokenAndTheLast15) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile prof = load_profile(bundled_profile());
  PolicyOptions o;
  o.attn = "fasa";
  o.budget = Budget::count(64);
  const auto defaults = make_fasa_policy_from(prof, o, *m);
  EXPECT_EQ(defaults->device_selection(m->config.n_layer)->sink, 1);
  EXPECT_EQ(defaults->device_selection(m->config.n_layer)->recent, 15);
  EXPECT_NE(defaults->summary().find("the first 1 and last 15 tokens kept"), std::string::npos) << defaults->summary();
  o.sink = o.recent = 0;
  const auto paper = make_fasa_policy_from(prof, o, *m);
  EXPECT_EQ(paper->device_selection(m->config.n_layer)->sink, 0);
  EXPECT_EQ(paper->summary().find("tokens kept"), std::string::npos);
  EXPECT_EQ(stream_sink(PolicyOptions{}), 8);
}

// The adaptive budget (tip_mass, Twilight's top-p): the fewest of the budget's top TIP rows whose softmax
// weights (TIP's partial scores / sqrt(head_dim), over every row) reach the mass; mass 1 keeps the budget.
TEST(FasaDecoding, AdaptiveBudgetKeepsTheFewestTopRowsHoldingTheMass) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile prof = load_profile(bundled_profile());
  const FcLayout fcs(m->config);
  const int D = m->config.head_dim, T = 400, budget = 60, layer = 2, head = 0;
  auto keys = test::random_floats((size_t)T * D, 11), vals = test::random_floats((size_t)T * D, 12);
  auto q = test::random_floats(D, 13);
  for (auto& x : q) x *= 12;  // a peaked softmax: a few rows hold most of the mass
  const auto chunks = prof.dominant_fcs(layer, head, prof.n_tip, FcSharing::Group, FcRank::Agreement);
  std::vector<std::pair<double, int>> s;  // (-score, row)
  double z = 0;
  for (int j = 0; j < T; ++j) {
    double v = 0;
    for (int f : chunks)
      for (int d : fcs.dims(f)) v += (double)q[d] * keys[j * D + d];
    s.push_back({-v, j});
  }
  std::sort(s.begin(), s.end());
  for (auto& [v, j] : s) z += std::exp((-v + s[0].first) / std::sqrt((double)D));
  for (double mass : {0.3, 0.6, 0.9, 1.0}) {
    FasaOptions o;
    o.budget = {budget, false};
    o.mass = mass;
    FasaPolicy policy(prof, m->config, o);
    KvCache cache(1, 1, D, T, {policy.key_layout(layer, head / 2)}, DType::F32);
    for (int j = 0; j < T; ++j) cache.store(0, 0, j, &keys[j * D], &vals[j * D]);
    std::vector<float> qp(D);
    cache.permute_query(0, 0, q.data(), qp.data());
    std::vector<int32_t> rows;
    ASSERT_TRUE(select_one(policy, {layer, head, head / 2, T - 1, qp.data()}, cache.view(0, 0, T), rows));
    std::set<int32_t> want;
    double kept = 0;
    for (int i = 0; i < budget && (want.empty() || kept < mass * z * (1 - 1e-6)); ++i) {
      want.insert(s[i].second);
      kept += std::exp((-s[i].first + s[0].first) / std::sqrt((double)D));
    }
    EXPECT_EQ(std::set<int32_t>(rows.begin(), rows.end()), want) << mass;
    if (mass == 0.3) {  // the test's softmax puts the mass on a few rows, not on one
      EXPECT_GT(rows.size(), 1u);
      EXPECT_LT(rows.size(), (size_t)budget / 2);
    }
    if (mass == 1.0) {
      EXPECT_EQ(rows.size(), (size_t)budget);
    }
  }
}

// DoubleSparse scores on the group's heaviest channels by the profile's statistic, picks the top rows
// by those partial scores (all channels: the exact top rows), counts the label cache's bytes, and
// refuses a profile without channel statistics.
TEST(DoubleSparse, ScoresOnTheGroupsHeaviestChannels) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile prof = load_profile(bundled_profile());
  const ModelConfig& c = m->config;
  const int D = c.head_dim, T = 300, layer = 2, head = 3, kvh = head / 2;
  const auto keys = test::random_floats((size_t)T * D, 15), vals = test::random_floats((size_t)T * D, 16);
  const auto q = test::random_floats(D, 17);
  for (int r : {8, D}) {
    DoubleSparsePolicy policy(prof, c, {20, false}, {}, r);
    const KeyLayout layout = policy.key_layout(layer, kvh);
    ASSERT_EQ(layout.n_dom, r);
    std::vector<std::pair<double, int>> weight;  // the group's statistic per channel, heaviest first
    for (int d = 0; d < D; ++d)
      weight.push_back({-(prof.channel_qk[((size_t)layer * c.n_head + 2 * kvh) * D + d] +
                          prof.channel_qk[((size_t)layer * c.n_head + 2 * kvh + 1) * D + d]), d});
    std::sort(weight.begin(), weight.end());
    std::set<int> heavy;
    for (int i = 0; i < r; ++i) heavy.insert(weight[i].second);
    EXPECT_EQ(std::set<int>(layout.perm.begin(), layout.perm.begin() + r), heavy);
    KvCache cache(1, 1, D, T, {layout}, DType::F32);
    for (int j = 0; j < T; ++j) cache.store(0, 0, j, &keys[(size_t)j * D], &vals[(size_t)j * D]);
    std::vector<float> qp(D);
    cache.permute_query(0, 0, q.data(), qp.data());
    std::vector<int32_t> rows;
    const uint64_t bytes0 = cache.bytes_read();
    ASSERT_TRUE(select_one(policy, {layer, head, kvh, T - 1, qp.data()}, cache.view(0, 0, T), rows));
    EXPECT_EQ(cache.bytes_read() - bytes0, (uint64_t)T * r * sizeof(float));
    std::vector<std::pair<float, int>> score;
    for (int j = 0; j < T; ++j) {
      float v = 0;
      for (int d : heavy) v += q[d] * keys[(size_t)j * D + d];
      score.push_back({-v, j});
    }
    std::sort(score.begin(), score.end());
    std::set<int32_t> want;
    for (int i = 0; i < 20; ++i) want.insert(score[i].second);
    EXPECT_EQ(std::set<int32_t>(rows.begin(), rows.end()), want) << r << " channels";
  }
  Profile old = prof;
  old.channel_qk.clear();
  EXPECT_NE(test::error_message([&] { DoubleSparsePolicy(old, c, {20, false}, {}, 8); }).find("no channel statistics"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { DoubleSparsePolicy(prof, c, {20, false}, {}, D + 1); }).find("ds_channels"),
            std::string::npos);
}

// A decode step asks for the group of query heads sharing a KV head at once (one TIP pass over the
// K_dom plane): each head gets the rows it would get alone; dense layers stay dense.
TEST(FasaDecoding, GroupSelectionEqualsPerHeadSelection) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile prof = load_profile(bundled_profile());
  const int D = m->config.head_dim, T = 200, group = m->config.n_head / m->config.n_head_kv, kvh = 1;
  ASSERT_GT(group, 1);
  for (FcSharing sh : {FcSharing::Group, FcSharing::Head}) {
    FasaOptions o;
    o.budget = {24, false};
    o.sharing = sh;
    o.sink = 1;
    FasaPolicy policy(prof, m->config, o);
    for (int layer : {0, 3}) {  // layer 0 is dense by default
      KvCache cache(1, 1, D, T, {policy.key_layout(layer, kvh)});
      auto keys = test::random_floats((size_t)T * D, 5), vals = test::random_floats((size_t)T * D, 6);
      for (int j = 0; j < T; ++j) cache.store(0, 0, j, &keys[j * D], &vals[j * D]);
      std::vector<float> qs((size_t)group * D);
      std::vector<AttentionQuery> queries(group);
      for (int i = 0; i < group; ++i) {
        auto q = test::random_floats(D, 10 + i);
        cache.permute_query(0, 0, q.data(), &qs[(size_t)i * D]);
        queries[i] = {layer, kvh * group + i, kvh, T - 1, &qs[(size_t)i * D]};
      }
      std::vector<std::vector<int32_t>> rows(group);
      auto sparse = std::make_unique<bool[]>(group);
      policy.select(queries.data(), group, cache.view(0, 0, T), rows.data(), sparse.get());
      for (int i = 0; i < group; ++i) {
        std::vector<int32_t> alone;
        EXPECT_EQ(sparse[i], select_one(policy, queries[i], cache.view(0, 0, T), alone));
        EXPECT_EQ(sparse[i], layer != 0);
        EXPECT_EQ(std::set<int32_t>(rows[i].begin(), rows[i].end()), std::set<int32_t>(alone.begin(), alone.end()))
            << name_of(sh) << " head " << i;
        EXPECT_EQ(rows[i].size(), layer != 0 ? 24u : 0u);
      }
    }
  }
}

TEST(FasaDecoding, OptionErrors) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const Profile p = load_profile(bundled_profile());
  FasaOptions o;
  o.n_tip = 33;
  EXPECT_THROW(FasaPolicy(p, m->config, o), Error);
  o.n_tip = 0;
  o.dense_layers = {6};
  EXPECT_THROW(FasaPolicy(p, m->config, o), Error);
}

}  // namespace
}  // namespace fasa
