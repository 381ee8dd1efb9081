// Continuous batching (Batch in include/fasa/fasa.h): members join and leave between forward passes;
// each pass is one eval_together over every member's next step.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include "api/generation.h"
#include "api/prompt_chunk.h"
#include "fasa/fasa.h"
#include "model/session.h"

namespace fasa {

using Clock = std::chrono::steady_clock;

struct Batch::Member {
  Context* ctx = nullptr;
  Context::Feed prompt;  // what the context evaluates before generating (a pending token first)
  size_t fed = 0;               // of prompt, evaluated so far
  GenerationOptions opts;
  TextCallback on_text;
  DoneCallback on_done;
  std::unique_ptr<Context::Generation> gen;  // once the prompt is in
  int32_t next = -1;                         // generating: the token the next pass evaluates
  Clock::time_point prompt_start = Clock::now();

  // The pass's entry for this member's decode step (its generation's next token).
  SessionTokens decode_step() const { return {ctx->session_.get(), {&next, 1}, true}; }
  // Its prompt's next tokens, at most `room` and max_chunk, as a feed alone evaluates them: dense
  // prefill, or the decode step of a pending generated token.
  SessionTokens next_chunk(int64_t room, int64_t max_chunk) const {
    const std::vector<int32_t>& tokens = prompt.tokens;
    const size_t n = std::min<size_t>(std::min<int64_t>(room, max_chunk), tokens.size() - fed);
    return {ctx->session_.get(), {tokens.data() + fed, n}, prompt.decode};
  }
  // After a pass that evaluated n of its tokens: false while its prompt has more to feed; else the
  // context takes the step in (after_eval) and true: the member's generation goes on or starts.
  bool after_pass(size_t n) {
    if (gen) {
      ctx->after_eval(false);
      return true;
    }
    fed += n;
    if (fed < prompt.tokens.size()) return false;
    ctx->after_eval(!prompt.decode);
    return true;
  }
};

namespace {

// Runs the pass (the caller bounded its size) and returns how long it took.
double timed_eval(const std::vector<SessionTokens>& pass) {
  const int64_t n = std::accumulate(pass.begin(), pass.end(), (int64_t)0,
                                    [](int64_t a, const SessionTokens& t) { return a + (int64_t)t.tokens.size(); });
  const auto t0 = Clock::now();
  eval_together(pass, (int)std::max<int64_t>(n, 1));  // one pass: its size was bounded above
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Folds a pass of `seconds` with n_prompt prompt tokens into the smoothed timings prompt_chunk() plans with.
void learn_pass_time(double seconds, int64_t n_prompt, bool generating, double& decode_pass_seconds,
                     double& prompt_token_seconds) {
  auto smooth = [](double& avg, double x) { avg = avg > 0 ? 0.7 * avg + 0.3 * x : x; };
  if (n_prompt == 0) smooth(decode_pass_seconds, seconds);
  else if (generating && n_prompt >= kMinPromptChunk)  // (while no decode pass alone was timed: all of it)
    smooth(prompt_token_seconds, std::max(seconds - decode_pass_seconds, 1e-9) / (double)n_prompt);
}

}  // namespace

bool Batch::advance(Member& m) {
  m.next = m.ctx->next_token(*m.gen);
  if (m.next >= 0) return true;
  GenerationResult r = m.ctx->finish_generation(*m.gen);
  if (m.on_done) m.on_done(std::move(r), nullptr);
  return false;
}

bool Batch::begin(Member& m) {
  m.ctx->stats_.prompt_seconds += std::chrono::duration<double>(Clock::now() - m.prompt_start).count();
  m.gen = m.ctx->start_generation(m.opts, m.on_text);
  return advance(m);
}

Batch::Batch(Options opts) : opts_(opts) {
  if (opts_.max_pass_tokens < 1 || opts_.max_prompt_chunk < 0 || !(opts_.max_pass_seconds >= 0))
    throw Error("Batch: max_pass_tokens must be at least 1, max_prompt_chunk and max_pass_seconds not negative");
  if (opts_.max_prompt_chunk == 0) opts_.max_prompt_chunk = opts_.max_pass_tokens;
}

Batch::~Batch() = default;

size_t Batch::size() const { return members_.size(); }

int64_t Batch::prefilling() const {
  int64_t n = 0;
  for (const auto& m : members_) n += (int64_t)(m->prompt.tokens.size() - m->fed);
  return n;
}

void Batch::add(Context& ctx, std::vector<int32_t> prompt, const GenerationOptions& opts, TextCallback on_text,
                DoneCallback on_done) {
  for (const auto& m : members_)
    if (m->ctx == &ctx) throw Error("Batch::add: the context is already in the batch");
  check_generation(opts, !prompt.empty() || ctx.n_past() > 0);
  auto m = std::make_unique<Member>();
  m->ctx = &ctx;
  m->opts = opts;
  m->on_text = std::move(on_text);
  m->on_done = std::move(on_done);
  m->prompt = ctx.take_feed(prompt);
  if (!m->prompt.tokens.empty() || begin(*m)) members_.push_back(std::move(m));
}

bool Batch::step() {
  if (members_.empty()) return false;
  // Decode steps first, then prompt chunks in the room left.
  std::vector<SessionTokens> pass;
  std::vector<Member*> in_pass;
  int64_t room = opts_.max_pass_tokens;
  for (const auto& m : members_)
    if (m->gen) {
      pass.push_back(m->decode_step());
      in_pass.push_back(m.get());
      --room;
    }
  const bool generating = !pass.empty();
  room = prompt_chunk(std::max(room, kMinPromptChunk), generating, opts_.max_pass_seconds, decode_pass_seconds_,
                      prompt_token_seconds_);
  int64_t n_prompt = 0;
  for (const auto& m : members_)
    if (!m->gen && room > 0) {
      pass.push_back(m->next_chunk(room, opts_.max_prompt_chunk));
      in_pass.push_back(m.get());
      const int64_t n = (int64_t)pass.back().tokens.size();
      room -= n;
      n_prompt += n;
    }
  if (opts_.threads > 0) omp_set_num_threads(opts_.threads);
  std::vector<const Member*> done;
  auto fail = [&](Member& m, std::exception_ptr error) {
    if (m.on_done) m.on_done({}, error);
    done.push_back(&m);
  };
  try {
    const double seconds = timed_eval(pass);
    learn_pass_time(seconds, n_prompt, generating, decode_pass_seconds_, prompt_token_seconds_);
  } catch (...) {  // the pass's members are in no state to go on
    for (Member* m : in_pass) fail(*m, std::current_exception());
  }
  if (done.empty())
    for (size_t i = 0; i < in_pass.size(); ++i) {
      Member& m = *in_pass[i];
      try {  // a member's own failure (its callback, its automatic profile) ends that member only
        if (!m.after_pass(pass[i].tokens.size())) continue;
        if (!(m.gen ? advance(m) : begin(m))) done.push_back(&m);
      } catch (...) {
        fail(m, std::current_exception());
      }
    }
  std::erase_if(members_, [&](const auto& m) { return std::find(done.begin(), done.end(), m.get()) != done.end(); });
  return true;
}

std::vector<GenerationResult> generate_together(std::span<Context* const> contexts,
                                                std::span<const GenerationOptions> opts,
                                                std::span<const TextCallback> on_text) {
  const size_t n = contexts.size();
  if (opts.size() != n && opts.size() != 1) throw Error("generate_together: one GenerationOptions, or one per context");
  if (!on_text.empty() && on_text.size() != n) throw Error("generate_together: one text callback per context, or none");
  // Checked before any joins: a context that joined has handed its pending token to the batch.
  for (size_t i = 0; i < n; ++i) {
    Context& c = *contexts[i];
    if (&c.engine_ != &contexts[0]->engine_) throw Error("generate_together: the contexts must share one engine");
    if (std::count(contexts.begin(), contexts.end(), &c) > 1) throw Error("generate_together: a context appears twice");
    check_generation(opts[opts.size() == 1 ? 0 : i], c.n_past() > 0);
  }
  Batch batch({.threads = n > 0 ? contexts[0]->opts_.threads : 0});
  std::vector<GenerationResult> results(n);
  std::exception_ptr failure;
  for (size_t i = 0; i < n; ++i)
    batch.add(*contexts[i], {}, opts[opts.size() == 1 ? 0 : i], on_text.empty() ? TextCallback{} : on_text[i],
              [&, i](GenerationResult r, std::exception_ptr error) {
                results[i] = std::move(r);
                if (error && !failure) failure = error;
              });
  while (batch.step()) {
  }
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace fasa
