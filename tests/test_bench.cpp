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
      auto logits = ses.prefill(m->tokenizer.encode("abc", true));
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
  const auto once = s.decode(tok);
  const std::vector<float> first(once.begin(), once.end());
  s.truncate(30);
  auto again = s.decode(tok);
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
  const int nd = 2 * fcs;  // FASA's K_dom width with group sharing
  for (const DType kv_type : {DType::F16, DType::F32, DType::Q8_0}) {
    SCOPED_TRACE(name_of(kv_type));
    const DType type = kv_type;
    auto counted = [&](const std::string& attn, FcSharing sharing, bool tip_int8 = false) {
      PolicyOptions p;
      p.attn = attn;
      p.budget = Budget::count(budget);
      p.fcs = fcs;
      p.fc_sharing = sharing;
      p.synthetic_profile = true;
      p.cache.types.k = p.cache.types.v = kv_type;
      p.cache.types.tip_int8 = tip_int8;
      return run_bench_test(*m, p, t, 1).kv_bytes_per_token;
    };
    // Bytes of a whole key row (dense layout, or FASA's K_dom | K_rest planes), of a value row.
    const double key = kv_row_bytes(type, D), split_key = kv_row_bytes(type, nd) + kv_row_bytes(type, D - nd);
    const double value = kv_row_bytes(type, D);
    double full = 0, dense_rows = 0, fasa_rows = 0, tip = 0, tip8 = 0, head_scans = 0;
    for (int i = 0; i < n_gen; ++i) {
      const int rows = depth + i + 1;
      full += (double)L * HKV * rows * (key + value);
      // layer 0 stays dense; each head of the sparse layer reads its own selected rows
      dense_rows += (double)HKV * rows * (key + value) + (double)H * budget * (key + value);
      fasa_rows += (double)HKV * rows * (key + value) + (double)H * budget * (split_key + value);
      // the K_dom plane, once per group, but for the forced rows (fasa's defaults: the first token and
      // the last 7, at most half the budget of 16)
      const int scanned = rows - 1 - std::min(15, budget / 2 - 1);
      tip += (double)HKV * scanned * kv_row_bytes(type, nd);
      tip8 += (double)HKV * scanned * kv_row_bytes(DType::Q8_0, nd);  // its int8 copy
      head_scans += (double)H * rows * key;  // every whole key, scanned by each query head for itself
    }
    EXPECT_DOUBLE_EQ(counted("full", FcSharing::Group), full / n_gen);
    // The baselines' own scans count too: oracle every whole key, SparQ head_dim/4 dims of each.
    EXPECT_DOUBLE_EQ(counted("oracle", FcSharing::Group), (dense_rows + head_scans) / n_gen);
    if (type != DType::Q8_0) {  // (Q8_0's block scales make a quarter of a row's bytes fractional)
      EXPECT_DOUBLE_EQ(counted("sparq", FcSharing::Group), (dense_rows + head_scans / 4) / n_gen);
    }
    EXPECT_DOUBLE_EQ(counted("fasa", FcSharing::Group), (fasa_rows + tip) / n_gen);
    EXPECT_DOUBLE_EQ(counted("fasa", FcSharing::Group, true), (fasa_rows + (type == DType::Q8_0 ? tip : tip8)) / n_gen);
    // Per-head chunk sets: the group's union plane, 2*fcs to 4*fcs dims wide, is scanned once.
    const double head = counted("fasa", FcSharing::Head);
    EXPECT_GE(head, (fasa_rows + tip) / n_gen);
    EXPECT_LE(head, (fasa_rows + 2 * tip) / n_gen);
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
  p.cache.types.k = p.cache.types.v = DType::F32;
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
  auto made = make_policy(p, *m, nullptr);
  for (int h = 0; h < 4; ++h) EXPECT_EQ(dynamic_cast<FasaPolicy&>(*made).scored_dims(1, h).size(), 2u * chunks);
  EXPECT_NE(policy_variant(p, *m).find("fcs=2 "), std::string::npos) << policy_variant(p, *m);
  p.fcs = 3;
  EXPECT_EQ(fasa_chunks(p, *m), 3);
  EXPECT_NE(policy_variant(p, *m).find("fcs=3 "), std::string::npos);
  p.fcs = 0;  // a profile's own count
  p.profile = test::temp_dir() + "/five.profile.json";
  Profile five = synthetic_profile(*m, 5, 1);
  five.top_k = 8;  // as a calibration would have recorded
  save_profile(five, p.profile);
  EXPECT_EQ(fasa_chunks(p, *m), 5);
  EXPECT_NE(policy_variant(p, *m).find("fcs=5 "), std::string::npos);
  p.attn = "oracle";
  EXPECT_EQ(fasa_chunks(p, *m), 0);
}

}  // namespace
}  // namespace fasa
