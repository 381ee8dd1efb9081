// The public API (include/fasa/fasa.h): generation equals the session's own greedy loop, contexts
// continue across feeds, stop strings and UTF-8 pieces, cancellation; chat formats.
#include <fasa/fasa.h>
#include <gtest/gtest.h>

#include "api/text_stream.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "select/attention_policy.h"
#include "sparse/policy.h"
#include "test_util.h"

namespace fasa {
namespace {

const char* kPrompt = "Ge1:1 In the beginning God created the heaven and the earth.";

// Greedy tokens after `prompt` from a bare Session: the reference the API must reproduce.
std::vector<int32_t> session_greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  SessionOptions so;
  so.n_ctx = (int64_t)prompt.size() + n;
  Session s(m, so);
  return test::greedy_tokens(s, prompt, n);
}

GenerationOptions greedy(int n) {
  GenerationOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  return g;
}

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new Engine(FASA_BUNDLED_MODEL); }
  static void TearDownTestSuite() { delete engine_; }
  static Engine* engine_;
};
Engine* ApiTest::engine_ = nullptr;

TEST_F(ApiTest, GreedyGenerationEqualsTheSessionLoop) {
  const std::vector<int32_t> prompt = engine_->tokenize(kPrompt, true);
  const std::vector<int32_t> ref = session_greedy(engine_->model(), prompt, 24);
  Context ctx(*engine_, {});
  EXPECT_EQ(ctx.feed(kPrompt), (int64_t)prompt.size());
  std::string streamed;
  const GenerationResult r = ctx.generate(greedy(24), [&](std::string_view p) {
    streamed += p;
    return true;
  });
  EXPECT_EQ(r.n_tokens, 24);
  EXPECT_EQ(r.finish_reason, FinishReason::Length);
  EXPECT_EQ(streamed, r.text);
  std::string want;
  for (int32_t t : ref) want += engine_->model().tokenizer.token_text(t);
  EXPECT_EQ(r.text, want);
  EXPECT_EQ(ctx.stats().prompt_tokens, (int64_t)prompt.size());
  EXPECT_EQ(ctx.stats().generated_tokens, 24);
}

// Each context counts the KV bytes its own attention reads, and only those: full attention's decode
// step reads every cached row whole (F16 keys and values) in every layer.
TEST_F(ApiTest, EachContextCountsItsOwnKvReads) {
  const ModelConfig& c = engine_->model().config;
  Context a(*engine_, {}), b(*engine_, {});
  const uint64_t prompt = (uint64_t)a.feed(kPrompt);
  b.feed(kPrompt);
  const uint64_t a0 = a.stats().kv_bytes_read, b0 = b.stats().kv_bytes_read;
  EXPECT_GT(a0, 0u);  // the prefill's attention
  a.generate(greedy(2));  // one decode step (the first token's), at position `prompt`
  const uint64_t row = (uint64_t)c.n_layer * c.n_head_kv * c.head_dim * 2 * sizeof(uint16_t);
  EXPECT_EQ(a.stats().kv_bytes_read - a0, (prompt + 1) * row);
  EXPECT_EQ(b.stats().kv_bytes_read, b0);
  // Of them, the decode steps' own (what `fasa run` prints per token): the one step's, none of the prefill's
  EXPECT_EQ(a.stats().decode_steps, 1);
  EXPECT_EQ(a.stats().decode_kv_bytes_read, (prompt + 1) * row);
  EXPECT_EQ(b.stats().decode_kv_bytes_read, 0u);
}

// A feed is prefilled densely however it is split (one token at a time too); decode_tokens runs each
// token through the policy. The size of a call no longer decides which.
TEST_F(ApiTest, FeedsPrefillAndDecodeTokensDecode) {
  const std::vector<int32_t> prompt = engine_->tokenize(kPrompt, true);
  ContextOptions o;
  o.policy.attn = "stream";
  o.policy.budget = Budget::count(4);
  Context whole(*engine_, o), split(*engine_, o), decoded(*engine_, o);
  whole.feed_tokens(prompt);
  for (int32_t t : prompt) split.feed_tokens({t});
  decoded.decode_tokens(prompt);
  const std::span<const float> a = whole.logits(), b = split.logits(), c = decoded.logits();
  double split_gap = 0, decode_gap = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    split_gap = std::max(split_gap, (double)std::abs(a[i] - b[i]));
    decode_gap = std::max(decode_gap, (double)std::abs(a[i] - c[i]));
  }
  EXPECT_LT(split_gap, 2e-3) << decode_gap;  // rounding: the chunks differ
  EXPECT_GT(decode_gap, 0.1) << split_gap;  // StreamingLLM reads 4 rows
  EXPECT_EQ(decoded.tokens(), prompt);
  EXPECT_EQ(whole.policy_summary(), "stream: budget 4 tokens per head");  // the run header: tokens or a share
  EXPECT_EQ(decoded.stats().prompt_tokens, (int64_t)prompt.size());
}

TEST_F(ApiTest, ContextContinuesAcrossFeedsAndGenerations) {
  // Prompt, 6 generated tokens, more text, 6 more == one session over all those tokens.
  Context ctx(*engine_, {});
  ctx.feed(kPrompt);
  const GenerationResult a = ctx.generate(greedy(6));
  EXPECT_EQ(ctx.n_past(), (int64_t)engine_->tokenize(kPrompt, true).size() + 6);
  const std::vector<int32_t> more = engine_->tokenize(" And", false);
  ctx.feed_tokens(more);
  const GenerationResult b = ctx.generate(greedy(6));

  std::vector<int32_t> all = engine_->tokenize(kPrompt, true);
  const std::vector<int32_t> first = session_greedy(engine_->model(), all, 6);
  all.insert(all.end(), first.begin(), first.end());
  all.insert(all.end(), more.begin(), more.end());
  const std::vector<int32_t> second = session_greedy(engine_->model(), all, 6);
  std::string want;
  for (int32_t t : second) want += engine_->model().tokenizer.token_text(t);
  EXPECT_EQ(b.text, want);
}

// truncate() back to the prompt, then generate: the same reply as the first time (the logits of the
// prompt's last token are evaluated again, not those of the last generated token); tokens() follows.
TEST_F(ApiTest, TruncateBackToThePromptRepliesAsBefore) {
  Context ctx(*engine_, {});
  ctx.feed(kPrompt);
  const std::vector<int32_t> prompt = engine_->tokenize(kPrompt, true);
  EXPECT_EQ(ctx.tokens(), prompt);
  const GenerationResult a = ctx.generate(greedy(8));
  EXPECT_EQ((int64_t)ctx.tokens().size(), ctx.n_past());
  EXPECT_EQ(std::vector<int32_t>(ctx.tokens().begin() + prompt.size(), ctx.tokens().end()), a.tokens);
  ctx.truncate((int64_t)prompt.size());
  EXPECT_EQ(ctx.tokens(), prompt);
  EXPECT_EQ(ctx.generate(greedy(8)).text, a.text);
  ctx.truncate(3);  // and a shorter prefix, fed the rest again
  ctx.feed_tokens({prompt.begin() + 3, prompt.end()});
  EXPECT_EQ(ctx.generate(greedy(8)).text, a.text);
  EXPECT_THROW(ctx.truncate(ctx.n_past() + 1), Error);
}

// A context goes on under another policy from what it holds, as a fresh context with that policy does
// after the same prompt: FASA's K_dom plane comes from the cached keys. Policies that vote with the
// queries they saw, a Python-style custom policy and another KV type cannot take over.
TEST_F(ApiTest, SwitchPolicyGoesOnAsAFreshContextWithThatPolicy) {
  const std::string prompt = std::string(kPrompt) + " Ge1:2 And the earth was without form, and void;";
  auto policy = [](const char* attn) {
    PolicyOptions p;
    p.attn = attn;
    p.budget = Budget::count(8);
    p.synthetic_profile = true;  // FASA without a calibrated profile
    return p;
  };
  auto context = [&](const char* attn) {
    ContextOptions co;
    co.policy = policy(attn);
    return std::make_unique<Context>(*engine_, co);
  };
  for (const char* attn : {"fasa", "stream", "quest", "sparq", "full"}) {
    auto fresh = context(attn), switched = context("h2o");
    fresh->feed(prompt);
    switched->feed(prompt);
    ASSERT_TRUE(switched->can_switch_policy(policy(attn))) << attn;
    ASSERT_TRUE(switched->switch_policy(policy(attn))) << attn;
    EXPECT_EQ(switched->options().policy.attn, attn);
    EXPECT_EQ(switched->generate(greedy(12)).text, fresh->generate(greedy(12)).text) << attn;
  }
  auto full = context("full");
  Context& ctx = *full;
  ctx.feed(prompt);
  for (const char* voter : {"h2o", "snapkv"}) EXPECT_FALSE(ctx.switch_policy(policy(voter))) << voter;
  PolicyOptions q8 = policy("fasa");
  q8.cache.types.k = DType::Q8_0;
  EXPECT_FALSE(ctx.switch_policy(q8));
  EXPECT_EQ(ctx.options().policy.attn, "full");  // unchanged by a refusal
  ContextOptions co;  // int8 key blocks would be quantized again in another key order
  co.policy = q8;
  co.policy.attn = "stream";
  Context q8_ctx(*engine_, co);
  q8_ctx.feed(prompt);
  EXPECT_FALSE(q8_ctx.switch_policy(q8));
}

// The registry's `votes` column says what each policy's truncate_is_exact() says (one decides whether a
// context takes over a cache, the other whether a truncated cache is reused), and its `gpu` column what
// its device_selection() says (the list a CPU-only policy's -ngl error names).
TEST_F(ApiTest, RegistryColumnsMatchEachPolicy) {
  for (const PolicyInfo& row : policy_registry()) {
    PolicyOptions p;
    p.attn = row.name;
    p.synthetic_profile = true;
    const auto made = make_policy(p, engine_->model(), nullptr);
    EXPECT_EQ(made->truncate_is_exact(), !row.votes) << row.name;
    EXPECT_EQ(made->device_selection(engine_->model().config.n_layer).has_value(), row.gpu) << row.name;
  }
}

// Log-probabilities of fed tokens: chunked evaluation gives what one token at a time gives.
TEST_F(ApiTest, FedTokensLogprobsEqualStepByStep) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) {  // > 256 tokens: several chunks
    const std::vector<int32_t> t = engine_->tokenize(std::string(kPrompt) + " And the earth was without form, and void; "
                                                     "and darkness was upon the face of the deep. And the Spirit of God "
                                                     "moved upon the face of the waters.", i == 0);
    for (int k = 0; k < 4; ++k) ids.insert(ids.end(), t.begin(), t.end());
  }
  ASSERT_GT(ids.size(), 300u);
  Context chunked(*engine_, {});
  std::vector<TokenLogprob> lp;
  chunked.feed_tokens(ids, &lp, 3);
  ASSERT_EQ(lp.size(), ids.size());
  EXPECT_FALSE(lp[0].known);
  for (size_t i = 2; i < ids.size(); i += 97) {  // a sample of positions, each fed as a 2-token prefill
    Context c(*engine_, {});
    std::vector<TokenLogprob> one;
    c.feed_tokens({ids.begin(), ids.begin() + i});
    c.feed_tokens({ids[i]}, &one, 3);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_NEAR(one[0].logprob, lp[i].logprob, 1e-3) << i;
    EXPECT_EQ(one[0].top[0].first, lp[i].top[0].first) << i;
  }
}

TEST_F(ApiTest, CallbackCancels) {
  Context ctx(*engine_, {});
  ctx.feed(kPrompt);
  int calls = 0;
  const GenerationResult r = ctx.generate(greedy(20), [&](std::string_view) { return ++calls < 3; });
  EXPECT_EQ(r.finish_reason, FinishReason::Cancelled);
  EXPECT_EQ(calls, 3);
  EXPECT_LT(r.n_tokens, 20);
}

TEST_F(ApiTest, StopStringEndsTheReplyBeforeIt) {
  Context full(*engine_, {});
  full.feed(kPrompt);
  const std::string text = full.generate(greedy(24)).text;
  const size_t cut = text.find("LORD");
  ASSERT_NE(cut, std::string::npos) << text;
  Context ctx(*engine_, {});
  ctx.feed(kPrompt);
  GenerationOptions g = greedy(24);
  g.stop = {"LORD", "never appears"};
  const GenerationResult r = ctx.generate(g);
  EXPECT_EQ(r.finish_reason, FinishReason::Stop);
  EXPECT_EQ(r.text, text.substr(0, cut));
}

TEST_F(ApiTest, ErrorsAreClear) {
  ContextOptions small;
  small.n_ctx = 4;
  Context ctx(*engine_, small);
  EXPECT_THROW(ctx.feed(kPrompt), Error);
  Context empty(*engine_, {});
  EXPECT_THROW(empty.generate(greedy(4)), Error);
  PolicyOptions bad;
  bad.attn = "no-such-policy";
  EXPECT_THROW(engine_->check_policy(bad), Error);
  EXPECT_THROW(Engine("/nonexistent/model.gguf"), Error);
}

TEST_F(ApiTest, ControlTokensAreParsedOnlyWhenAsked) {
  const Tokenizer& tok = engine_->model().tokenizer;
  const std::string eos_text = tok.piece(tok.eos());  // "</s>"
  const std::vector<int32_t> plain = engine_->tokenize("a" + eos_text + "b", false);
  const std::vector<int32_t> special = engine_->tokenize("a" + eos_text + "b", false, true);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), tok.eos()), 0);
  EXPECT_EQ(std::count(special.begin(), special.end(), tok.eos()), 1);
  EXPECT_TRUE(tok.is_end_of_generation(tok.eos()));
}

TEST(TextStream, HoldsBackPartialUtf8) {
  TextStream s({});
  const std::string e_acute = "\xC3\xA9";
  EXPECT_EQ(s.push("a" + e_acute.substr(0, 1)), "a");
  EXPECT_EQ(s.push(e_acute.substr(1)), e_acute);
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, StopStringAcrossTokens) {
  TextStream s({"END", "xyz"});
  EXPECT_EQ(s.push("abc E"), "abc ");  // "E" might start "END"
  EXPECT_EQ(s.push("N"), "");
  EXPECT_EQ(s.push("Dtail"), "");  // the stop string and what follows are dropped
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("more"), "");
}

TEST(TextStream, HeldPrefixIsReleasedWhenItIsNotAStop) {
  TextStream s({"END"});
  EXPECT_EQ(s.push("xEN"), "x");
  EXPECT_EQ(s.push("O"), "ENO");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("E"), "");
  EXPECT_EQ(s.finish(), "E");
}

TEST(TextStream, EarliestStopWins) {
  TextStream s({"cd", "b"});
  EXPECT_EQ(s.push("abcd"), "a");
  EXPECT_TRUE(s.stopped());
}

TEST(ChatTemplate, FormatsAreRecognisedAndRendered) {
  const std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Who?"}};
  EXPECT_EQ(detect_chat_format("{{ '<|start_header_id|>' + message['role'] }}"), ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_format("{{'<|im_start|>' + message['role'] + '\\n'}}"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_format("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFormat::Mistral);
  EXPECT_EQ(detect_chat_format("{{'<|user|>' + '\n' + message['content'] + '<|end|>'}}"), ChatFormat::Phi3);
  EXPECT_EQ(detect_chat_format("{{ '<start_of_turn>' + role + '\n' }}"), ChatFormat::Gemma);
  EXPECT_EQ(detect_chat_format(""), ChatFormat::Plain);
  EXPECT_EQ(render_chat(ChatFormat::Gemma, m),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nWho?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render_chat(ChatFormat::Phi3, m),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nWho?<|end|>\n"
            "<|assistant|>\n");
  EXPECT_EQ(render_chat(ChatFormat::ChatML, m),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
            "<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatFormat::Llama3, {{"user", " Hi \n"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatFormat::Mistral, m), "[INST] Be brief.\n\nHi [/INST] Hello</s>[INST] Who? [/INST]");
  EXPECT_EQ(render_chat(ChatFormat::Plain, {{"user", "Hi"}}), "user: Hi\nassistant:");
}

// SmolLM2's template (as its GGUF carries it) writes a system turn when the conversation has none;
// a template without one, or a conversation with its own, keeps what it says. No template: a Gemma
// vocabulary's turns, else plain lines.
TEST(ChatTemplate, DefaultSystemMessageAndGemmaTurnsWithoutATemplate) {
  const std::string smollm2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
      "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  const ChatStyle style = chat_style(smollm2, false);
  EXPECT_EQ(style.format, ChatFormat::ChatML);
  EXPECT_EQ(render_chat(style, {{"user", "Hi"}}),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(style, {{"system", "Be brief."}, {"user", "Hi"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_style("{{'<|im_start|>' + message['role'] + '\\n'}}", false).default_system, "");
  EXPECT_EQ(chat_style("", true).format, ChatFormat::Gemma);
  EXPECT_EQ(chat_style("", false).format, ChatFormat::Plain);
}

}  // namespace
}  // namespace fasa
