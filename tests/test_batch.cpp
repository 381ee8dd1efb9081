// Batched decoding: sequences evaluated together (eval_together, generate_together) end as each
// evaluated alone (the same greedy tokens and logits, bit for bit), for every policy, FASA-M and Q8_0
// keys and values.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include <omp.h>

#include "api/prompt_chunk.h"
#include "bench/synthetic_model.h"
#include "fasa/fasa.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "sparse/policy.h"
#include "test_util.h"

namespace fasa {
namespace {

constexpr int kSequences = 3, kSteps = 10;

// What a sequence produced: its greedy tokens and the logits each came from.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [step][n_vocab]
  void record(std::span<const float> l) {
    logits.emplace_back(l.begin(), l.end());
    tokens.push_back(argmax(l));
  }
};

std::vector<std::vector<int32_t>> random_prompts(const Model& m) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(3, m.config.n_vocab - 1);
  std::vector<std::vector<int32_t>> prompts;
  // Unequal lengths, all past the budget (so the policies pick); the third joins two decode steps in a
  // pass of 15 tokens, within kMatmulSmallBatch, where each token's matmul result is its own bit for bit.
  for (int n : {40, 57, 13}) {
    prompts.emplace_back(n);
    for (auto& t : prompts.back()) t = token(rng);
  }
  return prompts;
}

// A context of 128; a ubatch > 0 (and no rewind) makes a sliding window's cache a ring of window - 1 +
// ubatch positions.
SessionOptions options(const PolicyOptions& o, int n_ubatch) {
  SessionOptions so = session_options(o, 128);
  if (n_ubatch > 0) so.n_ubatch = n_ubatch, so.n_rewind = 0;
  return so;
}

// Each sequence alone: its prompt, then greedy steps.
std::vector<Trace> alone(const Model& m, const PolicyOptions& o, const std::vector<std::vector<int32_t>>& prompts,
                         int n_ubatch = 0) {
  std::vector<Trace> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Session s(m, options(o, n_ubatch), make_policy(o, m, nullptr));
    out[i].record(s.prefill(prompts[i]));
    for (int k = 0; k < kSteps; ++k) {
      const int32_t t = out[i].tokens.back();
      out[i].record(s.decode(t));
    }
  }
  return out;
}

// Together: sequences 0 and 1 prefill in one pass; then every pass decodes them while the third
// sequence's prompt joins at step 3 (a prompt chunk and decode steps in one pass) and decodes after.
std::vector<Trace> together(const Model& m, const PolicyOptions& o, const std::vector<std::vector<int32_t>>& prompts,
                            int n_ubatch = 0) {
  std::vector<std::unique_ptr<Session>> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(std::make_unique<Session>(m, options(o, n_ubatch), make_policy(o, m, nullptr)));
  std::vector<Trace> out(prompts.size());
  std::vector<SessionTokens> batch = {{seqs[0].get(), prompts[0]}, {seqs[1].get(), prompts[1]}};
  eval_together(batch);
  for (int i : {0, 1}) out[i].record(seqs[i]->logits());
  const int join = 3;
  std::vector<int32_t> next(prompts.size());
  for (int k = 0; k <= kSteps + join; ++k) {
    batch.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const bool started = i < 2 || k > join;
      if (i == 2 && k == join) batch.push_back({seqs[i].get(), prompts[i]});
      if (!started || out[i].tokens.size() > (size_t)kSteps) continue;
      next[i] = out[i].tokens.back();
      batch.push_back({seqs[i].get(), {&next[i], 1}, true});
    }
    if (batch.empty()) break;
    eval_together(batch);
    for (const SessionTokens& b : batch) out[b.session == seqs[0].get() ? 0 : b.session == seqs[1].get() ? 1 : 2].record(b.session->logits());
  }
  return out;
}

class BatchedDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedDecode, EqualsEachSequenceAlone) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const auto prompts = random_prompts(*m);
  PolicyOptions o;
  o.attn = GetParam();
  o.budget = Budget::count(12);
  o.dense_layers = {};
  o.synthetic_profile = true;
  std::vector<PolicyOptions> variants;
  for (DType kv : {DType::F16, DType::Q8_0}) {
    o.cache.types.k = o.cache.types.v = kv;
    variants.push_back(o);
  }
  if (policy_info(o.attn).has_k_dom) {  // FASA-M: K_rest and V in the slow tier
    o.cache.types.k = o.cache.types.v = DType::F16;
    o.cache.offload.tier = KvOffloadOptions::Tier::Ram;
    variants.push_back(o);
  }
  for (const PolicyOptions& v : variants) {
    SCOPED_TRACE(v.attn + " kv " + name_of(v.cache.types.k) + " offload '" + offload_str(v.cache.offload) + "'");
    const std::vector<Trace> want = alone(*m, v, prompts), got = together(*m, v, prompts);
    for (int i = 0; i < kSequences; ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << "sequence " << i;
      for (size_t k = 0; k < want[i].logits.size(); ++k)
        ASSERT_EQ(got[i].logits[k], want[i].logits[k]) << "sequence " << i << " step " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, BatchedDecode, ::testing::ValuesIn(policy_names()),
                         [](const auto& info) { return info.param; });

// A mixture of experts (Q8_0 experts, as a quantized model has them): each expert's matmul runs over
// whichever tokens of the pass chose it, and every token still gets its own result bit for bit.
TEST(BatchedDecode, MixtureOfExpertsEqualsEachSequenceAlone) {
  const std::string path = test::temp_dir() + "/moe.gguf";
  write_synthetic_model(find_model_shape("qwen3moe-tiny"), DType::Q8_0, path, 3);
  auto m = load_model(path);
  const auto prompts = random_prompts(*m);
  for (const char* attn : {"full", "fasa"}) {
    PolicyOptions o;
    o.attn = attn;
    o.budget = Budget::count(12);
    o.dense_layers = {};
    o.synthetic_profile = true;
    const std::vector<Trace> want = alone(*m, o, prompts), got = together(*m, o, prompts);
    for (int i = 0; i < kSequences; ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << attn << " sequence " << i;
      for (size_t k = 0; k < want[i].logits.size(); ++k)
        ASSERT_EQ(got[i].logits[k], want[i].logits[k]) << attn << " sequence " << i << " step " << k;
    }
  }
}

// Gemma 3's sliding layers (window 16) attend densely to their window from a ring of 23 positions
// (ubatch 8) while every policy runs on the global layer: together as alone, for every policy.
TEST(BatchedDecode, SlidingWindowLayersEqualEachSequenceAlone) {
  const std::string path = test::temp_dir() + "/gemma3.gguf";
  write_synthetic_model(find_model_shape("gemma3-tiny"), DType::Q8_0, path, 3);
  auto m = load_model(path);
  const auto prompts = random_prompts(*m);
  for (const std::string& attn : policy_names()) {
    PolicyOptions o;
    o.attn = attn;
    o.budget = Budget::count(12);
    o.dense_layers = {};
    o.synthetic_profile = true;
    const std::vector<Trace> want = alone(*m, o, prompts, 8), got = together(*m, o, prompts, 8);
    for (int i = 0; i < kSequences; ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << attn << " sequence " << i;
      for (size_t k = 0; k < want[i].logits.size(); ++k)
        ASSERT_EQ(got[i].logits[k], want[i].logits[k]) << attn << " sequence " << i << " step " << k;
    }
  }
}

// One KV head and a window of 512 on two threads: a decode step's window is cut in slices that the
// threads share (as where the model has fewer KV heads than threads), in a step alone as together.
TEST(BatchedDecode, SharedOutWindowsEqualEachSequenceAlone) {
  ModelShape shape = find_model_shape("gemma3-tiny");
  shape.n_head_kv = 1;
  shape.sliding_window = 512;
  const std::string path = test::temp_dir() + "/gemma3-mqa.gguf";
  write_synthetic_model(shape, DType::F16, path, 5);
  auto m = load_model(path);
  std::vector<std::vector<int32_t>> prompts(2, std::vector<int32_t>(700));
  for (size_t i = 0; i < prompts.size(); ++i)
    for (size_t t = 0; t < 700; ++t) prompts[i][t] = 3 + (int32_t)((t * 31 + i * 7) % 1000);
  SessionOptions so;
  so.n_ctx = 720;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<std::vector<float>> alone_logits;
  for (const auto& p : prompts) {
    Session s(*m, so);
    s.prefill(p);
    const int32_t next = 5;
    const std::span<const float> l = s.decode(next);
    alone_logits.emplace_back(l.begin(), l.end());
  }
  Session a(*m, so), b(*m, so);  // prefilled alone (a pass of 2 x 256 prompt tokens is equal within rounding)
  a.prefill(prompts[0]);
  b.prefill(prompts[1]);
  const int32_t next = 5;
  eval_together(std::vector<SessionTokens>{{&a, {&next, 1}, true}, {&b, {&next, 1}, true}});
  EXPECT_THROW(eval_together(std::vector<SessionTokens>{{&a, prompts[0], true}}), Error);  // a decode step is one token
  EXPECT_EQ(std::vector<float>(a.logits().begin(), a.logits().end()), alone_logits[0]);
  EXPECT_EQ(std::vector<float>(b.logits().begin(), b.logits().end()), alone_logits[1]);
  omp_set_num_threads(threads);
}

// The public API: contexts generating together give what each generates alone, with their own
// options (length, stop string, sampling).
TEST(BatchedDecode, GenerateTogetherEqualsGenerateAlone) {
  Engine engine(FASA_BUNDLED_MODEL);
  const std::vector<std::string> prompts = {"Ge1:1 In the beginning", "Ex3:14 And God said unto Moses,",
                                            "Ps23:1 The LORD is my shepherd;"};
  std::vector<GenerationOptions> opts(3);
  opts[0].max_tokens = 12;
  opts[1].max_tokens = 20;
  opts[1].stop = {"not"};
  opts[2].max_tokens = 16;
  opts[2].sampling.temperature = 0.8f;
  opts[2].sampling.seed = 7;
  ContextOptions co;
  co.policy.attn = "stream";
  co.policy.budget = Budget::count(8);
  co.n_ctx = 256;
  std::vector<GenerationResult> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Context c(engine, co);
    c.feed(prompts[i]);
    want.push_back(c.generate(opts[i]));
  }
  std::vector<std::unique_ptr<Context>> ctxs;
  std::vector<Context*> ptrs;
  std::vector<std::string> streamed(prompts.size());
  std::vector<TextCallback> callbacks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ctxs.push_back(std::make_unique<Context>(engine, co));
    ctxs.back()->feed(prompts[i]);
    ptrs.push_back(ctxs.back().get());
    callbacks.push_back([&streamed, i](std::string_view piece) {
      streamed[i] += piece;
      return true;
    });
  }
  const std::vector<GenerationResult> got = generate_together(ptrs, opts, callbacks);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
    EXPECT_EQ(got[i].text, want[i].text) << i;
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << i;
    EXPECT_EQ(streamed[i], got[i].text) << i;
    EXPECT_EQ(ctxs[i]->n_past(), (int64_t)engine.tokenize(prompts[i], true).size() + got[i].n_tokens) << i;
  }
  EXPECT_EQ(want[1].finish_reason, FinishReason::Stop);  // the stop string ended one early, the others ran on
  EXPECT_EQ(got[0].n_tokens, 12);
  // The contexts go on after a batch like any other: a second generate continues each alone.
  GenerationOptions two;
  two.max_tokens = 2;
  EXPECT_EQ(ctxs[0]->generate(two).n_tokens, 2);
  EXPECT_THROW(generate_together(ptrs, std::span<const GenerationOptions>(opts.data(), 2)), Error);
}

// Continuous batching: a long prompt is fed in chunks between the others' decode steps (they keep
// streaming while it prefills), a context joins later and each leaves when done; every reply equals
// the context's own generate (prompt chunks round differently from one prefill: the same greedy text).
TEST(BatchedDecode, ContinuousBatchFeedsPromptsInChunksBetweenDecodeSteps) {
  Engine engine(FASA_BUNDLED_MODEL);
  std::string long_prompt = "Ge1:1 In the beginning God created the heaven and the earth.";
  for (int i = 0; i < 4; ++i) long_prompt += " And the earth was without form, and void;";
  const std::vector<std::string> prompts = {"Ps23:1 The LORD is my shepherd;", long_prompt, "Ex3:14 And God said"};
  GenerationOptions go;
  go.max_tokens = 12;
  go.ignore_eos = true;
  ContextOptions co;
  co.n_ctx = 256;
  std::vector<std::string> want;
  for (const std::string& p : prompts) {
    Context c(engine, co);
    c.feed(p);
    want.push_back(c.generate(go).text);
  }
  std::vector<std::unique_ptr<Context>> ctxs;
  for (size_t i = 0; i < prompts.size(); ++i) ctxs.push_back(std::make_unique<Context>(engine, co));
  std::vector<std::string> got(prompts.size());
  std::vector<int> done(prompts.size(), 0);
  Batch batch({.max_pass_tokens = 16});
  int streamed_while_prefilling = 0;  // pieces of context 0 that came while context 1's prompt was not all in
  auto add = [&](size_t i) {
    batch.add(*ctxs[i], engine.tokenize(prompts[i], true), go,
              [&, i](std::string_view) {
                if (i == 0 && batch.prefilling() > 0) ++streamed_while_prefilling;
                return true;
              },
              [&, i](GenerationResult r, std::exception_ptr error) {
                EXPECT_FALSE(error);
                got[i] = r.text;
                ++done[i];
              });
  };
  add(0);
  add(1);
  ASSERT_GT(engine.tokenize(long_prompt, true).size(), 40u);
  int steps = 0;
  for (; batch.step(); ++steps) {
    EXPECT_LE(batch.size(), 3u);
    if (steps == 2) add(2);
  }
  EXPECT_GT(streamed_while_prefilling, 2);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(done[i], 1) << i;
    EXPECT_EQ(got[i], want[i]) << i;
  }
  EXPECT_FALSE(batch.step());
  // A context goes on where it stopped (nothing new to feed); it cannot be in the batch twice, nor be
  // fed past its context.
  batch.add(*ctxs[0], {}, go);
  EXPECT_THROW(batch.add(*ctxs[0], {}, go), Error);
  EXPECT_THROW(batch.add(*ctxs[1], std::vector<int32_t>(300, 5), go), Error);
  while (batch.step()) {
  }
  EXPECT_EQ(ctxs[0]->stats().generated_tokens, 24);
}

// The prompt tokens a pass takes while others generate: what fits the time limit, at least 8, at most
// the room; a probe of 32 before a token's cost is known; all of the room without a limit or without
// generating members; where decode steps alone take longer than the limit, as long again as they take.
TEST(BatchedDecode, PromptChunkFitsThePassTime) {
  EXPECT_EQ(prompt_chunk(256, true, 0.5, 0.1, 0.01), 40);      // (0.5 - 0.1) / 0.01
  EXPECT_EQ(prompt_chunk(256, true, 0.5, 0.1, 0.0), kProbePromptChunk);
  EXPECT_EQ(prompt_chunk(20, true, 0.5, 0.1, 0.0), 20);
  EXPECT_EQ(prompt_chunk(256, true, 0.5, 0.1, 1.0), kMinPromptChunk);
  EXPECT_EQ(prompt_chunk(256, true, 10.0, 0.1, 0.01), 256);
  EXPECT_EQ(prompt_chunk(256, true, 0.5, 0.8, 0.01), 80);      // the decode steps' 0.8 s again
  EXPECT_EQ(prompt_chunk(256, false, 0.5, 0.1, 0.01), 256);
  EXPECT_EQ(prompt_chunk(256, true, 0.0, 0.1, 0.01), 256);
  EXPECT_EQ(prompt_chunk(256, true, 1e300, 0.1, 1e-300), 256);  // no overflow in the cast
}

// In a Batch: while a member generates, a new prompt's first chunk (32 tokens) measures a prompt
// token's cost, then the rest goes as the limit allows (all of it, under a loose limit); without a
// limit the whole prompt goes in one pass. The replies are the same either way.
TEST(BatchedDecode, PromptChunksProbeTheCostWhileOthersStream) {
  Engine engine(FASA_BUNDLED_MODEL);
  GenerationOptions go;
  go.max_tokens = 40;
  go.ignore_eos = true;
  std::string long_prompt = "Ge1:1 In the beginning God created the heaven and the earth.";
  for (int i = 0; i < 8; ++i) long_prompt += " And the earth was without form, and void;";
  const std::vector<int32_t> prompt = engine.tokenize(long_prompt, true);
  ASSERT_GT(prompt.size(), 80u);
  std::vector<std::string> replies;
  for (double limit : {1e9, 0.0}) {
    ContextOptions co;
    co.n_ctx = 256;
    Context a(engine, co), b(engine, co);
    Batch batch({.max_pass_seconds = limit});
    std::string reply;
    batch.add(a, engine.tokenize("Ps23:1 The LORD is my shepherd;", true), go);
    batch.step();  // a's prompt
    batch.step();  // a decode step alone: its time is measured
    batch.add(b, prompt, go, [&](std::string_view piece) { return reply += piece, true; });
    std::vector<int64_t> taken;  // prompt tokens of each pass
    for (int64_t before = batch.prefilling(); before > 0; before = batch.prefilling()) {
      ASSERT_TRUE(batch.step());
      taken.push_back(before - batch.prefilling());
    }
    const int64_t n = (int64_t)prompt.size();
    const std::vector<int64_t> want = limit > 0 ? std::vector<int64_t>{kProbePromptChunk, n - kProbePromptChunk}
                                                : std::vector<int64_t>{n};
    EXPECT_EQ(taken, want);
    while (batch.step()) {
    }
    replies.push_back(reply);
  }
  EXPECT_EQ(replies[0], replies[1]);
}

}  // namespace
}  // namespace fasa
