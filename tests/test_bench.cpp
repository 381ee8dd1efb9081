// Benchmark plumbing: synthetic models of a given shape load and run, random fill and truncation keep
// the session consistent, and the KV bytes the kernels count equal the formula for each policy.
#include <cmath>

#include "calib/profile.h"
#include "bench/bench.h"
#include "eval/decode_eval.h"
#include "model/session.h"
#include "bench/synthetic_model.h"
#include "sparse/fasa.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

const ModelShape kTiny{"tiny", "llama", 2, 64, 4, 2, 96, 300, 256, 10000.0f, 8.0f, false};

TEST(SyntheticModel, EveryTypeAndArchLoadsAndDecodes) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0})
    for (const char* arch : {"llama", "qwen2"}) {
      ModelShape s = kTiny;
      s.arch = arch;
      const std::string path = test::temp_dir() + "/m.gguf";
      write_synthetic_model(s, t, path, 3);
      auto m = load_model(path);
      EXPECT_EQ(m->config.n_layer, 2);
      EXPECT_EQ(m->config.rope_freq_factors.size(), 8u);  // Llama-3 scaling written as rope_freqs
      EXPECT_EQ(m->n_params(), 2LL * 300 * 64 + 64 + 2 * (2 * 64 + 64 * 16 * (8 + 4) + 3 * 64 * 96) +
                                   (s.arch == "qwen2" ? 2 * 16 * (4 + 4) : 0));
      Session ses(*m, {});
      auto logits = ses.eval(m->tokenizer.encode("abc", true));
      for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << dtype_name(t) << " " << arch;
    }
  EXPECT_THROW(find_model_shape("llama9-huge"), Error);
  EXPECT_EQ(find_model_shape("llama3.2-1b").n_layer, 16);
}

TEST(BenchSession, RandomFillAndTruncate) {
  const std::string path = test::temp_dir() + "/m.gguf";
  write_synthetic_model(kTiny, DType::F32, path, 3);
  auto m = load_model(path);
  SessionOptions o;
  o.n_ctx = 40;
  Session s(*m, o);
  s.fill_random(30, 1);
  EXPECT_EQ(s.n_past(), 30);
  const int32_t tok = 5;
  const auto once = s.eval(std::span<const int32_t>(&tok, 1));
  const std::vector<float> first(once.begin(), once.end());
  s.truncate(30);
  auto again = s.eval(std::span<const int32_t>(&tok, 1));
  EXPECT_EQ(std::vector<float>(again.begin(), again.end()), first);  // same depth, same step
  EXPECT_THROW(s.truncate(32), Error);
  EXPECT_THROW(s.fill_random(20, 1), Error);  // past the context
}

// Bytes per decoded token the attention kernels report vs the formula: dense heads read each whole key
// and value row (2-byte F16 or 4-byte F32 elements) once per KV head (GQA groups share the pass); a
// sparse head reads its own selected rows; FASA's TIP scans each KV head's K_dom plane once; the
// oracle and SparQ scan keys per query head.
TEST(BenchCounting, KvBytesPerTokenMatchTheFormula) {
  const std::string path = test::temp_dir() + "/m.gguf";
  write_synthetic_model(kTiny, DType::F32, path, 3);
  auto m = load_model(path);
  const int L = 2, H = 4, HKV = 2, D = 16, depth = 100, n_gen = 4, budget = 16, fcs = 2;
  BenchTest t;
  t.n_gen = n_gen;
  t.depth = depth;
  t.random_fill = true;
  t.repetitions = 1;
  for (auto [type_name, elem_bytes] : {std::pair{"f16", 2}, std::pair{"f32", 4}}) {
    const std::string kv_type = type_name;  // a plain variable: clang 14 cannot capture structured bindings
    const int eb = elem_bytes;
    SCOPED_TRACE(kv_type);
    auto counted = [&](const std::string& attn, const std::string& sharing) {
      PolicyOptions p;
      p.attn = attn;
      p.budget = std::to_string(budget);
      p.fcs = fcs;
      p.fc_sharing = sharing;
      p.synthetic_profile = true;
      p.kv_type = kv_type;
      return run_bench_test(*m, p, t, 1).kv_bytes_per_token;
    };
    double full = 0, fasa_rows = 0, tip_rows = 0, head_scans = 0;
    for (int i = 0; i < n_gen; ++i) {
      const int rows = depth + i + 1;
      full += (double)L * HKV * rows * 2 * D * eb;
      fasa_rows += (double)HKV * rows * 2 * D * eb + (double)H * budget * 2 * D * eb;  // layer 0 stays dense
      tip_rows += (double)HKV * rows * eb;                                            // per K_dom dim scanned
      head_scans += (double)H * rows * eb;  // per key dim that each query head scans for itself
    }
    EXPECT_DOUBLE_EQ(counted("full", "group"), full / n_gen);
    // The baselines' own scans count too: oracle every whole key, SparQ head_dim/4 dims of each.
    EXPECT_DOUBLE_EQ(counted("oracle", "group"), (fasa_rows + head_scans * D) / n_gen);
    EXPECT_DOUBLE_EQ(counted("sparq", "group"), (fasa_rows + head_scans * D / 4) / n_gen);
    EXPECT_DOUBLE_EQ(counted("fasa", "group"), (fasa_rows + tip_rows * 2 * fcs) / n_gen);
    // Per-head chunk sets: the group's union plane, 2*fcs to 4*fcs dims wide, is scanned once.
    const double head = counted("fasa", "head");
    EXPECT_GE(head, (fasa_rows + tip_rows * 2 * fcs) / n_gen);
    EXPECT_LE(head, (fasa_rows + tip_rows * 4 * fcs) / n_gen);
  }
}

// A prefill-then-decode test (-pg) times both parts, and counts KV bytes for the decoded tokens only:
// each reads the prompt's rows and those decoded before it.
TEST(BenchCounting, PromptThenDecodeCountsTheDecodedTokens) {
  const std::string path = test::temp_dir() + "/m.gguf";
  write_synthetic_model(kTiny, DType::F32, path, 3);
  auto m = load_model(path);
  const int L = 2, HKV = 2, D = 16, n_prompt = 12, n_gen = 3;
  BenchTest t;
  t.n_prompt = n_prompt;
  t.n_gen = n_gen;
  t.repetitions = 2;
  PolicyOptions p;
  p.attn = "full";
  p.kv_type = "f32";
  const BenchResult r = run_bench_test(*m, p, t, 1);
  double want = 0;
  for (int i = 0; i < n_gen; ++i) want += (double)L * HKV * (n_prompt + i + 1) * 2 * D * 4;
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token, want / n_gen);
  ASSERT_EQ(r.samples_ts.size(), 2u);
  EXPECT_GT(r.samples_ts[0], 0);
}

// FASA on a synthetic profile without --fcs scores calibration's default chunk count, and the
// records name the count used.
TEST(BenchRecords, ChunkCountIsTheOneUsed) {
  const std::string path = test::temp_dir() + "/m.gguf";
  write_synthetic_model(kTiny, DType::F32, path, 3);
  auto m = load_model(path);
  PolicyOptions p;
  p.attn = "fasa";
  p.synthetic_profile = true;
  const int chunks = default_n_tip(m->config);
  ASSERT_EQ(chunks, 2);  // n_rot 16 / 8
  EXPECT_EQ(fasa_chunks(p, *m), chunks);
  auto selector = make_selector(p, *m);
  for (int h = 0; h < 4; ++h) EXPECT_EQ(dynamic_cast<FasaSelector&>(*selector).scored_dims(1, h).size(), 2u * chunks);
  EXPECT_NE(policy_variant("fasa", p, *m).find("fcs=2 "), std::string::npos) << policy_variant("fasa", p, *m);
  p.fcs = 3;
  EXPECT_EQ(fasa_chunks(p, *m), 3);
  EXPECT_NE(policy_variant("fasa", p, *m).find("fcs=3 "), std::string::npos);
  p.fcs = 0;  // a profile's own count
  p.profile = test::temp_dir() + "/five.profile.json";
  Profile five = synthetic_profile(*m, 5, 1);
  five.top_k = 8;  // as a calibration would have recorded
  save_profile(five, p.profile);
  EXPECT_EQ(fasa_chunks(p, *m), 5);
  EXPECT_NE(policy_variant("fasa", p, *m).find("fcs=5 "), std::string::npos);
  p.attn = "oracle";
  EXPECT_EQ(fasa_chunks(p, *m), 0);
}

}  // namespace
}  // namespace fasa
