#pragma once
// fasa's public C++ API: load a model, open a context with an attention policy, feed a prompt,
// generate with a text callback, read the stats. The CLI (`fasa run`) and the server use it.
//
//   fasa::Engine engine("model.gguf");
//   fasa::PolicyOptions policy;                 // attn "full", or "fasa" with a profile and budget
//   policy.attn = "fasa"; policy.profile = "profile.json"; policy.budget = fasa::Budget::count(256);
//   fasa::Context ctx(engine, {.policy = policy, .n_ctx = 4096});
//   ctx.feed("In the beginning");
//   fasa::GenerationResult r = ctx.generate({.max_tokens = 64}, [](std::string_view s) {
//     std::fputs(std::string(s).c_str(), stdout);
//     return true;                              // false stops the generation
//   });
//
// Every failure (bad file, bad option, prompt longer than the context) throws fasa::Error.
// One Engine may serve many Contexts on different threads at once; a Context is single-threaded.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "fasa/chat.h"
#include "fasa/error.h"
#include "fasa/kv_memory.h"
#include "fasa/logprob.h"
#include "fasa/options.h"

namespace fasa {

class AutoProfileStore;
class DeviceModel;
struct Model;
class PromptProfiler;
struct Profile;
class Session;
class AttentionPolicy;

struct ModelInfo {
  std::string path;
  std::string format;        // "gguf" or "safetensors"
  std::string arch;          // "llama", "qwen2", "qwen3", "qwen3moe", "phi3" or "gemma3"
  int64_t n_params = 0;
  int64_t n_ctx_train = 0;
  int n_vocab = 0;
  std::string chat_format;   // "llama3", "chatml", "mistral", "phi3", "gemma" or "plain" (no or unknown template)
  size_t weight_bytes = 0;   // the weight matrices' bytes in the file
  size_t held_weight_bytes = 0;    // what they hold in memory, once: the packed copy and the rest read in place
                                   // (with every layer on a device: none; the device holds them)
  size_t packed_weight_bytes = 0;  // of that, the copy packed for this CPU (its rows' file pages dropped)
  size_t locked_weight_bytes = 0;  // of that, locked in RAM (EngineOptions::mlock)
  size_t vocab_bytes = 0;          // the tokenizer's tables in memory (counted once, at load)
  std::string device = "CPU";  // where the forward pass runs: "CPU", or the GPU and what it holds
  std::string bos_token, eos_token;  // their vocabulary pieces ("<s>", "<|im_end|>"; tokenize reads them back), empty where none
  bool add_bos = false;              // whether tokenize adds a BOS when asked to (the model wants one)
};

struct EngineOptions {
  // llama.cpp's -ngl: layers whose forward pass runs on the GPU (the Vulkan device `device`). 0: the
  // CPU; -1 or at least the model's layer count: every layer, weights and KV cache resident there,
  // full attention (this version puts all layers there or none).
  int gpu_layers = 0;
  int device = 0;  // the Vulkan device's index, in vulkaninfo's order
  // llama.cpp's --no-mmap (false): the model's files read into memory instead of mapped, so nothing
  // refers to them once loaded. Either way, weights that would not fit the memory available are refused.
  bool mmap = true;
  // llama.cpp's --mlock: what decoding reads locked in RAM (ModelInfo::locked_weight_bytes); where
  // the system refuses (RLIMIT_MEMLOCK), a warning on stderr.
  bool mlock = false;
};

class Engine {
 public:
  // A .gguf file or a Hugging Face model directory.
  explicit Engine(const std::string& model_path, const EngineOptions& opts = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const { return info_; }
  // Token ids of `text`; `add_bos` where the model wants one; `parse_special`: control tokens
  // written in the text become those tokens (chat prompts).
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos, bool parse_special = false) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  std::string token_text(int32_t id) const;  // the bytes one token stands for (may be part of a UTF-8 character)
  // The prompt text for a conversation, in the model's chat format, ending where the reply begins.
  std::string chat_prompt(const std::vector<ChatMessage>& messages) const;
  // Throws fasa::Error when the policy options are invalid for this model (unknown name, bad budget,
  // profile of another model), without allocating a context. FASA without a profile is valid: the
  // first long prompt makes one (--profile auto).
  void check_policy(const PolicyOptions& policy) const;

  const Model& model() const { return *model_; }  // the engine's internals, for tools and tests
  // FASA's automatic profile of this model, shared by the engine's contexts (calib/auto_profile.h).
  AutoProfileStore& auto_profiles() const { return *auto_profiles_; }
  const DeviceModel* device() const { return device_.get(); }  // null: the CPU runs the model

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<AutoProfileStore> auto_profiles_;
  std::unique_ptr<DeviceModel> device_;
  ModelInfo info_;
};

class AttentionPolicy;  // the token-selection seam (src/select/attention_policy.h)

struct ContextOptions {
  PolicyOptions policy;  // decode attention; prompts are always prefilled densely
  int64_t n_ctx = 0;     // tokens the context holds; 0: the model's training context
  int threads = 0;       // OpenMP threads of this context's calls; 0: the process default
  // A policy of the caller's own in place of policy.attn's (the Python module's register_policy);
  // policy's cache options still apply.
  std::shared_ptr<AttentionPolicy> custom_policy;
};

struct GenerationOptions {
  int max_tokens = 64;
  int logprobs = -1;              // >= 0: record each generated token's log-probability and this many alternatives
  SamplerOptions sampling;
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  std::vector<std::string> stop;  // generation ends before the first occurrence of any of these
  // With logprobs >= 0: gets each generated token's log-probability before its text reaches the
  // TextCallback (a stream sends them with the text).
  std::function<void(const TokenLogprob&)> on_logprob;
};

// Why a generation ended: an end token or a stop string, max_tokens (or the end of the context), or
// the text callback returned false.
enum class FinishReason { Stop, Length, Cancelled };
const char* name_of(FinishReason r);  // "stop", "length", "cancelled" (OpenAI's words)

struct GenerationResult {
  std::string text;            // everything generated (stop string excluded)
  std::vector<int32_t> tokens;          // the tokens generated, end token excluded
  std::vector<TokenLogprob> logprobs;   // per generated token, with GenerationOptions::logprobs >= 0
  FinishReason finish_reason = FinishReason::Length;
  int n_tokens = 0;            // tokens generated
  double seconds = 0;          // decode wall time
};

struct ContextStats {
  int64_t prompt_tokens = 0;     // fed (prefilled) tokens
  int64_t generated_tokens = 0;
  double prompt_seconds = 0;
  double decode_seconds = 0;
  uint64_t kv_bytes_read = 0;    // KV cache bytes attention and the policy's selection read (prefill included)
  uint64_t decode_kv_bytes_read = 0;  // of them, by this context's own one-token steps (generate, decode_tokens;
                                      // not steps a Batch takes for it): what a policy saves
  int64_t decode_steps = 0;
};

// A context's memory, estimated from the sizes (the run header prints it): the model's weights as held
// and its tokenizer, this context's KV cache in RAM and its forward pass's scratch. tests/test_memory.cpp holds it within
// 10 % of the resident memory they add up to once every weight has been read.
struct MemoryEstimate {
  size_t weights = 0;  // the copy packed for this CPU and the matrices read in place from the file
  size_t vocab = 0;    // the tokenizer's tables
  size_t kv = 0;       // the KV cache in RAM: its fast tier, and FASA-M's slow tier where that is RAM
  size_t scratch = 0;  // activations and logits of a whole ubatch
  size_t total() const { return weights + vocab + kv + scratch; }
};

// Receives the generated text piece by piece, each piece whole UTF-8 characters; return false to stop.
using TextCallback = std::function<bool(std::string_view piece)>;

class Context;

// Continuous batching: contexts of one engine join and leave between forward passes, and every pass
// advances each member by one step — the next chunk of its prompt, or one generated token — with the
// weights read once for all of them, while each member attends over its own cache with its own
// policy. Each member ends as its own feed_tokens + generate would leave it: bit for bit where every
// pass holds at most 16 tokens; larger passes (prompt chunks) round differently with float weights
// (quantized weights: bit for bit), so a greedy reply may part at a near tie. Not thread-safe: one
// thread adds and steps (the server's scheduler). Destroying a batch with members leaves their
// contexts mid-way (step() until it is empty first).
class Batch {
 public:
  struct Options {
    int max_pass_tokens = 256;  // tokens per forward pass (llama.cpp's -b): decode steps first, then
                                // prompt chunks in the room left (at least 8), so a long prompt never
                                // holds up the others' tokens for more than a pass
    int max_prompt_chunk = 0;   // prompt tokens of one member per pass (llama.cpp's -ub); 0: max_pass_tokens
    int threads = 0;            // OpenMP threads of the passes; 0: the process default
    // While members are generating, a pass takes only the prompt tokens that keep it under about this
    // long (from the times of earlier passes), so their streams pause no longer; where their decode
    // steps alone take longer, a pass takes prompt tokens for as long again. 0: no limit.
    double max_pass_seconds = 0.5;
  };
  // Called once per member when it has finished (its result) or failed (`error` set, result empty).
  using DoneCallback = std::function<void(GenerationResult result, std::exception_ptr error)>;

  explicit Batch(Options opts);
  Batch() : Batch(Options{}) {}
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // `ctx` (not already a member; it must outlive its membership) is fed `prompt` after what it holds,
  // then generates with `opts`, streaming to `on_text`; `on_done` gets the result. Throws fasa::Error,
  // the context unchanged, for what feed_tokens or generate would refuse (nothing fed at all, a prompt
  // over the context, a token outside the vocabulary, max_tokens < 0).
  void add(Context& ctx, std::vector<int32_t> prompt, const GenerationOptions& opts, TextCallback on_text = {},
           DoneCallback on_done = {});
  // One forward pass over every member's next step; finished members leave (on_done). False when the
  // batch was empty. A failed pass fails every member it held (on_done with the error); a member whose
  // own step fails after the pass (its callback threw) fails alone.
  bool step();
  size_t size() const;
  int64_t prefilling() const;  // prompt tokens the members have yet to feed

 private:
  struct Member;
  bool advance(Member& m);  // samples m's next token; false (and on_done) once its generation has ended
  bool begin(Member& m);    // m's prompt is in: its generation starts; false when it ended at once
  Options opts_;
  std::vector<std::unique_ptr<Member>> members_;
  double decode_pass_seconds_ = 0;  // a pass without prompt tokens, smoothed over the last ones
  double prompt_token_seconds_ = 0;  // what each prompt token adds to a pass, smoothed; 0: not measured yet
};

// Generates in several contexts at once (a Batch stepped until every one is done): contexts[i] with
// opts[i] (one entry: the same for all), streaming to on_text[i] (optional); results[i] is what
// contexts[i]->generate(opts[i], on_text[i]) would give, bit for bit up to 16 contexts (the passes are
// their decode steps). The passes run on the first context's threads setting. If a context fails, the
// others still finish, then its error is thrown.
std::vector<GenerationResult> generate_together(std::span<Context* const> contexts,
                                                std::span<const GenerationOptions> opts,
                                                std::span<const TextCallback> on_text = {});

class Context {
 public:
  Context(const Engine& engine, const ContextOptions& opts);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Appends text (BOS first if the context is empty and the model wants one); returns the tokens added.
  int64_t feed(std::string_view text, bool parse_special = false);
  // With `logprobs`, also each fed token's log-probability given what precedes it ([ids.size()]),
  // with `top_n` alternatives.
  void feed_tokens(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs = nullptr, int top_n = 0);
  // As feed_tokens, but each token a decode step under the policy (a feed is prefilled densely):
  // scores a text as the policy reads it, as `fasa eval ppl` does (the server's echo_policy).
  void decode_tokens(const std::vector<int32_t>& ids, std::vector<TokenLogprob>* logprobs = nullptr, int top_n = 0);
  // Samples up to opts.max_tokens tokens after what was fed, streaming text to `on_text`.
  GenerationResult generate(const GenerationOptions& opts, const TextCallback& on_text = {});

  // The next token's logits after everything fed and generated ([n_vocab]; a pending token is
  // evaluated first); valid until the context changes. Throws when nothing was fed.
  std::span<const float> logits();
  int64_t n_past() const;
  int64_t n_ctx() const;
  const std::vector<int32_t>& tokens() const { return tokens_; }  // [n_past()] fed and generated, in order
  // Forgets positions >= n (n <= n_past()): the start of a cached prompt is kept for the next one.
  // Token n-1 is evaluated again by the next feed or generate (its logits went with the rest); so are
  // all n where a sliding window's cache no longer holds what position n sees (Gemma 3, far back).
  void truncate(int64_t n);
  // Positions whose keys and values are cached: n_past() less what the next feed evaluates first.
  int64_t n_cached() const;
  // Whether a truncated context continues exactly as a fresh one fed the same tokens would (false for
  // policies that keep votes of forgotten queries: H2O, SnapKV).
  bool prefix_reuse_is_exact() const;
  // Whether decoding attends to every token (full attention): then generated tokens' KV rows are what
  // a prefill of them would write, and a prompt cache may reuse them too.
  bool decode_is_dense() const;
  // Whether switch_policy(policy) keeps the cached rows: the same cache settings, with f16 or f32 keys
  // (int8 blocks would be quantized again in the new key order) and none offloaded, the CPU, and a
  // built-in or registered policy whose state is the cache's rows alone (not H2O or SnapKV, which vote
  // with the queries they saw; not FASA still waiting for an automatic profile).
  bool can_switch_policy(const PolicyOptions& policy) const;
  // Goes on with `policy` over the rows this context holds, as a context made with it would go on
  // after a dense prefill of them (the rows move into its key layout, e.g. FASA's K_dom plane). Rows
  // an earlier sparse policy decoded keep the keys its passes made: truncate() to what was prefilled
  // for an exact start. Returns false, changing nothing, where can_switch_policy is false.
  bool switch_policy(const PolicyOptions& policy);
  ContextStats stats() const;
  const ContextOptions& options() const { return opts_; }
  KvMemory kv_memory() const;  // where the KV cache lives now
  MemoryEstimate memory_estimate() const;
  // e.g. "fasa: budget 256 per head, TIP reads 25.0% of key dims"; with FASA's automatic profile,
  // whether it is still being measured or where it came from.
  std::string policy_summary() const;

 private:
  friend class Batch;
  friend std::vector<GenerationResult> generate_together(std::span<Context* const>, std::span<const GenerationOptions>,
                                                         std::span<const TextCallback>);
  struct Generation;  // one generate call in progress (engine.cpp)
  // Starts a generation after everything was evaluated; throws if nothing was fed.
  std::unique_ptr<Generation> start_generation(const GenerationOptions& opts, const TextCallback& on_text);
  // The tokens a feed of `ids` evaluates (a pending token first), recorded as fed; throws when they
  // would not fit the context. A decode step where they are only the last generated token (a
  // generation that stopped before evaluating it), else a prefill.
  struct Feed {
    std::vector<int32_t> tokens;
    bool decode = false;
  };
  Feed take_feed(const std::vector<int32_t>& ids);
  // Samples the next token and hands out its text. Returns the token, to be evaluated (decode or
  // eval_together, then after_eval), or -1 when the generation has ended (its result is complete).
  int32_t next_token(Generation& g);
  GenerationResult finish_generation(Generation& g);

  // Session::prefill and Session::decode on the context's threads, then after_eval.
  void prefill(std::span<const int32_t> ids, std::vector<float>* all_logits = nullptr);
  void decode(int32_t token);
  void after_eval(bool prefill);  // FASA's automatic profile: made or found once the prompt allows
  // `id`'s log-probability as the next token after what the session holds (none before the first).
  TokenLogprob next_logprob(int32_t id, int top_n) const;
  // The engine keeps an automatic profile now: the session goes on sparse with it.
  void go_sparse(std::string note);

  const Engine& engine_;
  ContextOptions opts_;
  std::shared_ptr<AttentionPolicy> policy_;
  std::unique_ptr<Session> session_;
  bool auto_pending_ = false;                 // FASA with no profile yet: dense until one exists
  std::unique_ptr<PromptProfiler> profiler_;  // ... measuring the dense prefill, when n_ctx allows
  std::string profile_note_;                  // where an automatic profile came from, for the summary
  std::vector<int32_t> unevaluated_;  // the last sampled token (or what truncate() had to drop), evaluated when it goes on
  bool unevaluated_generated_ = false;  // unevaluated_ is the last sampled token
  std::vector<int32_t> tokens_;       // [n_past()]
  ContextStats stats_;
};

}  // namespace fasa
