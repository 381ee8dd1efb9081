// FASA's automatic profile (--profile auto): a cache moved into another key layout equals one built
// with it; a context measures its first long prompt, then decodes as FASA with that profile would from
// the start; short prompts stay dense; the measurement is a fixed sample; damaged cache files are made
// again.
#include <fasa/fasa.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "calib/auto_profile.h"
#include "fasa/error.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "sparse/fasa.h"
#include "test_util.h"

namespace fasa {
namespace {

constexpr int kLayers = 2, kHeads = 2, kDim = 16;

std::vector<KeyLayout> permuted_layouts(int n_dom, int salt) {
  std::vector<KeyLayout> out(kLayers * kHeads);
  for (int i = 0; i < kLayers * kHeads; ++i) {
    for (int d = 0; d < kDim; ++d) out[i].perm.push_back((d * 5 + i + salt) % kDim);
    out[i].n_dom = n_dom;
  }
  return out;
}

void fill(KvCache& c, int64_t n, uint32_t seed) {
  for (int l = 0; l < kLayers; ++l)
    for (int h = 0; h < kHeads; ++h) {
      const std::vector<float> k = test::random_floats((size_t)n * kDim, seed + l * 7 + h);
      const std::vector<float> v = test::random_floats((size_t)n * kDim, seed + 100 + l * 7 + h);
      for (int64_t p = 0; p < n; ++p) c.store(l, h, p, &k[p * kDim], &v[p * kDim]);
    }
}

// Every stored element of the two caches (in their own layouts) is byte-equal.
void expect_same_rows(const KvCache& a, const KvCache& b, int64_t n) {
  for (int l = 0; l < kLayers; ++l)
    for (int h = 0; h < kHeads; ++h) {
      const KvHeadView x = a.view(l, h, n), y = b.view(l, h, n);
      ASSERT_EQ(x.n_dom, y.n_dom);
      const size_t dom = kv_row_bytes(x.k_type, x.n_dom), rest = kv_row_bytes(x.k_type, kDim - x.n_dom);
      ASSERT_EQ(x.k_tip != nullptr, y.k_tip != nullptr);
      for (int64_t p = 0; p < n; ++p) {
        EXPECT_EQ(0, std::memcmp(x.k_dom_row(p), y.k_dom_row(p), dom)) << l << "," << h << "," << p;
        EXPECT_EQ(0, std::memcmp(x.k_rest_row(p), y.k_rest_row(p), rest)) << l << "," << h << "," << p;
        EXPECT_EQ(0, std::memcmp(x.v_row(p), y.v_row(p), x.value_row_bytes())) << l << "," << h << "," << p;
        if (x.k_tip) {
          const size_t tip = kv_row_bytes(DType::Q8_0, x.n_dom);
          EXPECT_EQ(0, std::memcmp((const uint8_t*)x.k_tip + p * tip, (const uint8_t*)y.k_tip + p * tip, tip));
        }
      }
    }
}

TEST(KvCacheRelayout, RowsEqualACacheBuiltWithTheLayout) {
  const int64_t n = 50;
  for (KvTypes type : {KvTypes(DType::F16), KvTypes(DType::F32), KvTypes(DType::F16, DType::Q8_0, true)}) {
    KvCache moved(kLayers, kHeads, kDim, 64, {}, type);
    fill(moved, n, 3);
    const auto to = permuted_layouts(4, 1);
    moved.relayout(to, n);
    KvCache built(kLayers, kHeads, kDim, 64, to, type);
    fill(built, n, 3);
    expect_same_rows(moved, built, n);
    // From one sparse layout to another, and rows appended afterwards land in the new one.
    const auto other = permuted_layouts(6, 3);
    moved.relayout(other, n);
    KvCache built_other(kLayers, kHeads, kDim, 64, other, type);
    fill(built_other, n, 3);
    expect_same_rows(moved, built_other, n);
  }
  // Q8_0 keys are quantized again in their new blocks: close to the cache built with the layout.
  KvCache moved(kLayers, kHeads, kDim, 64, {}, DType::Q8_0), built(kLayers, kHeads, kDim, 64, permuted_layouts(4, 1), DType::Q8_0);
  fill(moved, n, 3), fill(built, n, 3);
  moved.relayout(permuted_layouts(4, 1), n);
  for (int l = 0; l < kLayers; ++l)
    for (int h = 0; h < kHeads; ++h) {
      const KvHeadView x = moved.view(l, h, n), y = built.view(l, h, n);
      std::vector<float> a, b;
      for (int64_t p = 0; p < n; ++p)
        for (int d = 0; d < kDim; ++d) a.push_back(x.key(p, d)), b.push_back(y.key(p, d));
      EXPECT_LE(test::normalized_error(a.data(), b.data(), a.size()), 1e-2);
      EXPECT_EQ(0, std::memcmp(x.v_row(0), y.v_row(0), n * x.value_row_bytes()));
    }
  KvCache c(kLayers, kHeads, kDim, 64);
  auto bad = permuted_layouts(4, 1);
  bad[0].perm[0] = bad[0].perm[1];
  EXPECT_THROW(c.relayout(bad, 10), Error);
  EXPECT_THROW(c.relayout(permuted_layouts(4, 1), 65), Error);
}

// The int8 TIP copy grows with K_dom: a relayout that would take the cache over --kv-fast-limit is
// refused with what it needs, and the cache is left as it was.
TEST(KvCacheRelayout, KeepsTheFastLimit) {
  const KvTypes tip(DType::F16, DType::F16, true);
  const size_t dense = KvCache(kLayers, kHeads, kDim, 64, {}, tip).bytes();
  KvOffloadOptions limit;
  limit.fast_limit = dense;
  KvCache c(kLayers, kHeads, kDim, 64, {}, tip, limit);
  fill(c, 20, 3);
  try {
    c.relayout(permuted_layouts(4, 1), 20);
    ADD_FAILURE() << "a relayout over the fast limit was allowed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_fast_limit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.layout(0, 0).n_dom, 0);
  EXPECT_EQ(c.bytes(), dense);
  limit.fast_limit = 2 * dense;
  KvCache roomy(kLayers, kHeads, kDim, 64, {}, tip, limit);
  roomy.relayout(permuted_layouts(4, 1), 0);
  EXPECT_EQ(roomy.layout(0, 0).n_dom, 4);
  EXPECT_GT(roomy.bytes(), dense);
}

// A tiny random-weight model, written once; each test gets its own XDG cache dir.
class AutoProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* x = std::getenv("XDG_CACHE_HOME")) saved_ = x;
    cache_ = test::temp_dir();
    setenv("XDG_CACHE_HOME", cache_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) unsetenv("XDG_CACHE_HOME");
    else setenv("XDG_CACHE_HOME", saved_.c_str(), 1);
  }

  static std::string model_path(uint32_t seed) {
    test::TinyLlamaSpec s;
    s.seed = seed;
    s.n_embd = 64;  // head_dim 16: 8 chunks per head, 2 kept
    const std::string path = test::temp_dir() + "/tiny" + std::to_string(seed) + ".gguf";
    test::write_file(path, test::tiny_llama_gguf(s).bytes());
    return path;
  }
  static std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int n_vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> out(n);
    for (auto& t : out) t = 3 + (int32_t)(rng() % (uint32_t)(n_vocab - 3));
    return out;
  }
  // Four different profiles of `m` that pass for automatic ones.
  static std::vector<Profile> automatic_like(const Model& m) {
    std::vector<Profile> made;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      Profile p = synthetic_profile(m, 2, seed);
      p.calibration_text = "auto: 1 in 32 queries of a prompt's first 1024 tokens";
      p.top_k = PromptProfiler::kTopK;
      p.min_pos = PromptProfiler::kMinPos;
      made.push_back(p);
    }
    return made;
  }
  static ContextOptions fasa_options(const std::string& profile = "") {
    ContextOptions o;
    o.policy.attn = "fasa";
    o.policy.profile = profile;
    o.policy.budget = Budget::count(64);
    o.policy.dense_layers = {};
    o.n_ctx = 1400;
    return o;
  }
  static GenerationOptions greedy(int n) {
    GenerationOptions g;
    g.max_tokens = n;
    g.ignore_eos = true;
    return g;
  }
  std::string cache_, saved_;
};

TEST_F(AutoProfileTest, FirstLongPromptMakesTheProfileThenDecodesAsFasaWithIt) {
  Engine engine(model_path(21));
  const Model& m = engine.model();
  const std::vector<int32_t> prompt = random_tokens(1100, 5, m.config.n_vocab);

  Context ctx(engine, fasa_options());
  EXPECT_NE(ctx.policy_summary().find("full attention until the context holds 1024 tokens"), std::string::npos);
  ctx.feed_tokens(prompt);
  const std::string file = engine.auto_profiles().path();
  EXPECT_NE(ctx.policy_summary().find("automatic profile from this prompt's first 1024 tokens, cached in " + file),
            std::string::npos) << ctx.policy_summary();
  const std::vector<int32_t> got = ctx.generate(greedy(12)).tokens;

  // The profile the engine keeps, and the cached file, which names the same chunks.
  const std::optional<Profile> kept = engine.auto_profiles().find();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->queries, (PromptProfiler::kMinTokens - PromptProfiler::kMinPos) / PromptProfiler::kStride);
  const Profile cached = load_profile(file);
  check_profile_matches(cached, m, file);
  for (int l = 0; l < m.config.n_layer; ++l)
    for (int h = 0; h < m.config.n_head; ++h)
      EXPECT_EQ(cached.dominant_fcs(l, h, 2, FcSharing::Group, FcRank::Agreement),
                kept->dominant_fcs(l, h, 2, FcSharing::Group, FcRank::Agreement));

  // Reference: a session with FASA and that profile from the start (its prefill is dense too).
  SessionOptions so;
  so.n_ctx = 1400;
  Session ref(m, so, make_fasa_policy_from(*kept, fasa_options().policy, m));
  const std::vector<int32_t> want = test::greedy_tokens(ref, prompt, 12);
  EXPECT_EQ(got, want);
  // Full attention decodes differently here: the comparison can tell the policies apart.
  ContextOptions full = fasa_options();
  full.policy.attn = "full";
  Context dense(engine, full);
  dense.feed_tokens(prompt);
  EXPECT_NE(dense.generate(greedy(12)).tokens, want);

  // A later context starts sparse at once with it.
  Context again(engine, fasa_options("auto"));
  EXPECT_NE(again.policy_summary().find("automatic profile of an earlier prompt"), std::string::npos);
  again.feed_tokens(prompt);
  EXPECT_EQ(again.generate(greedy(12)).tokens, want);
}

TEST_F(AutoProfileTest, ShortPromptsDecodeDensely) {
  Engine engine(model_path(22));
  const std::vector<int32_t> prompt = random_tokens(400, 6, engine.model().config.n_vocab);
  Context ctx(engine, fasa_options());
  ctx.feed_tokens(prompt);
  EXPECT_NE(ctx.policy_summary().find("full attention until"), std::string::npos);
  ContextOptions full = fasa_options();
  full.policy.attn = "full";
  Context dense(engine, full);
  dense.feed_tokens(prompt);
  EXPECT_EQ(ctx.generate(greedy(8)).tokens, dense.generate(greedy(8)).tokens);
  EXPECT_FALSE(engine.auto_profiles().find());
  EXPECT_FALSE(std::filesystem::exists(engine.auto_profiles().path()));
  // Offloading needs the profile's K_dom plane from the start: refused up front (a server at start-up).
  ContextOptions offload = fasa_options();
  offload.policy.cache.offload.tier = KvOffloadOptions::Tier::Ram;
  EXPECT_THROW(engine.check_policy(offload.policy), Error);
  EXPECT_THROW(Context(engine, offload), Error);
  // A context too short to measure says so, and does not measure.
  ContextOptions small = fasa_options();
  small.n_ctx = 512;
  Context short_ctx(engine, small);
  EXPECT_NE(short_ctx.policy_summary().find("too short to measure one"), std::string::npos) << short_ctx.policy_summary();
}

// With --tip-int8 the sparse layout needs more fast memory than the dense one; under a limit only the
// dense cache fits, the profile is not applied and the context goes on densely, saying why.
TEST_F(AutoProfileTest, AProfileOverTheFastLimitLeavesTheContextDense) {
  Engine engine(model_path(31));
  const ModelConfig& c = engine.model().config;
  const std::vector<int32_t> prompt = random_tokens(1100, 7, c.n_vocab);
  ContextOptions o = fasa_options();
  o.policy.cache.types.tip_int8 = true;
  o.policy.cache.offload.fast_limit =
      KvCache(c.n_layer, c.n_head_kv, c.head_dim, o.n_ctx, {}, KvTypes(DType::F16, DType::F16, true)).bytes();
  Context ctx(engine, o);
  ctx.feed_tokens(prompt);
  EXPECT_NE(ctx.policy_summary().find("dense: kv_fast_limit"), std::string::npos) << ctx.policy_summary();
  ContextOptions full = fasa_options();
  full.policy.attn = "full";
  Context dense(engine, full);
  dense.feed_tokens(prompt);
  EXPECT_EQ(ctx.generate(greedy(8)).tokens, dense.generate(greedy(8)).tokens);
}

// The profile belongs to the engine that made it, not to the process: another engine of the same
// model finds only what was cached on disk.
TEST_F(AutoProfileTest, EachEngineKeepsItsOwnProfile) {
  const std::string path = model_path(32);
  Engine a(path), b(path);
  Context maker(a, fasa_options());
  maker.feed_tokens(random_tokens(1030, 12, a.model().config.n_vocab));
  ASSERT_TRUE(a.auto_profiles().find());
  ASSERT_TRUE(std::filesystem::remove(a.auto_profiles().path()));
  EXPECT_FALSE(b.auto_profiles().find());
  EXPECT_NE(Context(b, fasa_options()).policy_summary().find("full attention until"), std::string::npos);
  EXPECT_NE(Context(a, fasa_options()).policy_summary().find("automatic profile of an earlier prompt"), std::string::npos);
}

TEST_F(AutoProfileTest, APendingContextTakesAProfileAnotherContextMade) {
  Engine engine(model_path(26));
  const int n_vocab = engine.model().config.n_vocab;
  Context waiting(engine, fasa_options());
  waiting.feed_tokens(random_tokens(300, 9, n_vocab));
  Context maker(engine, fasa_options());
  maker.feed_tokens(random_tokens(1030, 10, n_vocab));
  EXPECT_NE(maker.policy_summary().find("from this prompt"), std::string::npos);
  EXPECT_NE(waiting.policy_summary().find("full attention until"), std::string::npos);
  waiting.feed_tokens(random_tokens(20, 11, n_vocab));  // its next prefill finds the kept profile
  EXPECT_NE(waiting.policy_summary().find("automatic profile of an earlier prompt"), std::string::npos)
      << waiting.policy_summary();
}

// Two contexts (server slots), both measuring, finish at the same time on threads: the first profile
// kept is the engine's, both decode with it, and the cache holds one whole file.
TEST_F(AutoProfileTest, ContextsMeasuringAtOnceOnThreads) {
  Engine engine(model_path(27));
  const int n_vocab = engine.model().config.n_vocab;
  Context a(engine, fasa_options()), b(engine, fasa_options());  // both start measuring
  std::vector<Context*> ctx = {&a, &b};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] { ctx[i]->feed_tokens(random_tokens(1040, 20 + i, n_vocab)); });
  for (auto& t : threads) t.join();
  const std::string file = engine.auto_profiles().path();
  const int mine = (a.policy_summary().find("from this prompt's first 1024 tokens, cached in " + file) != std::string::npos) +
                   (b.policy_summary().find("from this prompt's first 1024 tokens, cached in " + file) != std::string::npos);
  const int earlier = (a.policy_summary().find("of an earlier prompt") != std::string::npos) +
                      (b.policy_summary().find("of an earlier prompt") != std::string::npos);
  EXPECT_EQ(mine, 1) << a.policy_summary() << "\n" << b.policy_summary();
  EXPECT_EQ(earlier, 1);
  EXPECT_NO_THROW(check_profile_matches(load_profile(file), engine.model(), file));
}

// Concurrent keeps: the first wins everywhere, each writer renames a file of its own, none is left over.
TEST_F(AutoProfileTest, ConcurrentKeepsKeepTheFirst) {
  auto m = load_model(model_path(28));
  const std::vector<Profile> made = automatic_like(*m);
  AutoProfileStore store(*m);
  std::vector<KeptProfile> got(made.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < made.size(); ++i) threads.emplace_back([&, i] { got[i] = store.keep(made[i]); });
  for (auto& t : threads) t.join();
  int mine = 0;
  for (const KeptProfile& k : got) {
    mine += k.mine;
    EXPECT_EQ(k.profile.mean_ca, got[0].profile.mean_ca);
  }
  EXPECT_EQ(mine, 1);
  const std::string file = store.path();
  EXPECT_EQ(load_profile(file).mean_ca.size(), got[0].profile.mean_ca.size());
  std::size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(file).parent_path()))
    entries += e.is_regular_file();
  EXPECT_EQ(entries, 1u) << "no temporary file is left";
}

// Stores of one model in one process (two engines, an evaluation) writing at once: each keeps its own,
// the file is one whole profile, and no temporary file is left.
TEST_F(AutoProfileTest, StoresWritingAtOnceLeaveOneWholeFile) {
  auto m = load_model(model_path(33));
  const std::vector<Profile> made = automatic_like(*m);
  std::vector<std::unique_ptr<AutoProfileStore>> stores;
  for (size_t i = 0; i < made.size(); ++i) stores.push_back(std::make_unique<AutoProfileStore>(*m));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < made.size(); ++i) threads.emplace_back([&, i] { EXPECT_TRUE(stores[i]->keep(made[i]).mine); });
  for (auto& t : threads) t.join();
  const std::string file = stores[0]->path();
  EXPECT_NO_THROW(check_profile_matches(load_profile(file), *m, file));
  std::size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(file).parent_path()))
    entries += e.is_regular_file();
  EXPECT_EQ(entries, 1u) << "no temporary file is left";
}

TEST_F(AutoProfileTest, MeasuresAFixedSampleOfTheFirstTokens) {
  auto m = load_model(model_path(23));
  const std::vector<int32_t> longer = random_tokens(1300, 7, m->config.n_vocab);
  const std::vector<int32_t> prefix(longer.begin(), longer.begin() + 1024);
  AutoProfileStore store(*m);
  const Profile a = make_auto_profile(store, prefix);
  PromptProfiler whole(*m);  // the profiler over a longer prefill: positions past kMinTokens are not measured
  SessionOptions so;
  so.n_ctx = (int64_t)longer.size();
  Session s(*m, so);
  s.set_observer(&whole);
  s.prefill(longer);
  const Profile b = whole.profile(longer);
  EXPECT_EQ(b.mean_ca, a.mean_ca);
  ASSERT_TRUE(a.choice && b.choice) << "the chunk choice is made on the first 1024 tokens";
  EXPECT_EQ(a.choice->layers, b.choice->layers);
  EXPECT_EQ(a.queries, 28);         // (1024 - 128) / 32
  AutoProfileStore fresh(*m);
  EXPECT_THROW(make_auto_profile(fresh, std::vector<int32_t>(prefix.begin(), prefix.begin() + 1000)), Error);
}

TEST_F(AutoProfileTest, DamagedCacheFileIsIgnoredAndMadeAgain) {
  Engine engine(model_path(24));
  const Model& m = engine.model();
  const std::string file = engine.auto_profiles().path();
  ASSERT_EQ(file.rfind(cache_ + "/fasa/profiles/", 0), 0u) << file;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  for (const std::string& bytes : {std::string("{\"format\": \"fasa-profile\", \"version\": 1, \"heads\": [1,"),
                                  std::string("\x00\xff garbage", 10)}) {
    test::write_file(file, bytes);
    EXPECT_FALSE(engine.auto_profiles().find());
  }
  save_profile(synthetic_profile(m, 2, 1), file);  // a valid profile of this model, not made automatically
  EXPECT_FALSE(engine.auto_profiles().find());
  Context ctx(engine, fasa_options());
  ctx.feed_tokens(random_tokens(1050, 8, m.config.n_vocab));
  EXPECT_NE(ctx.policy_summary().find("cached in " + file), std::string::npos) << ctx.policy_summary();
  EXPECT_NO_THROW(check_profile_matches(load_profile(file), m, file));
}

}  // namespace
}  // namespace fasa
