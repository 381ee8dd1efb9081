// fasa serve: the server's life (options checked, threads, bind, stop) and the scheduler, one thread that
// steps a Batch of every generating slot; a request's thread hands its job over and waits for the text.
#include "server/server_impl.h"

#include <cstdio>
#include <deque>
#include <optional>
#include <random>

namespace fasa {

std::string random_hex(int n) {
  std::random_device rd;
  std::mt19937_64 g(((uint64_t)rd() << 32) ^ rd() ^ (uint64_t)Clock::now().time_since_epoch().count());
  std::string s;
  for (int i = 0; i < n; ++i) s += "0123456789abcdef"[g() & 15];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Server::Server(const Engine& engine, ServerOptions opts) : impl_(std::make_unique<Impl>(engine, std::move(opts))) {
  Impl& s = *impl_;
  if (s.opts.parallel < 1 || s.opts.queue < 0) throw Error("--parallel must be >= 1 and --queue >= 0");
  if (s.opts.n_ctx <= 0) s.opts.n_ctx = engine.info().n_ctx_train;
  s.slot_ctx = s.opts.n_ctx / s.opts.parallel;  // as llama-server: -c is shared by the slots
  if (s.slot_ctx < 2)
    throw Error("a context of " + std::to_string(s.opts.n_ctx) + " tokens leaves less than 2 per slot for " +
                std::to_string(s.opts.parallel) + " parallel slots: raise -c (shared by the slots) or lower -np");
  if (s.opts.max_prompt_tokens <= 0 || s.opts.max_prompt_tokens >= s.slot_ctx) s.opts.max_prompt_tokens = s.slot_ctx - 1;
  if (s.opts.model_name.empty()) s.opts.model_name = engine.info().path;
  engine.check_policy(s.opts.policy);
  if (s.opts.batch_tokens < 1 || s.opts.ubatch_tokens < 0) throw Error("--batch-size must be >= 1 and --ubatch-size >= 0");
  // Threads for every running and waiting request, plus a few for /health and /metrics.
  const int pool = s.opts.parallel + s.opts.queue + 4;
  s.http.listener.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  s.http.listener.set_payload_max_length(s.opts.max_body_bytes);
  s.http.listener.set_socket_options(exclusive_listen_options);
  s.routes();
  s.scheduler.thread = std::thread([&s] { s.schedule(); });
}

Server::~Server() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.scheduler.mu);
    s.scheduler.stopping = true;
  }
  s.scheduler.wake.notify_all();
  s.scheduler.thread.join();
}

void Server::Impl::schedule() {
  Batch batch({.max_pass_tokens = opts.batch_tokens,
               .max_prompt_chunk = opts.ubatch_tokens,
               .threads = opts.threads,
               .max_pass_seconds = opts.max_pause_ms / 1000.0});
  Scheduler& s = scheduler;
  for (;;) {
    std::vector<std::function<void(Batch&)>> adds;
    {
      std::unique_lock lock(s.mu);
      s.wake.wait(lock, [&] { return s.stopping || !s.incoming.empty() || batch.size() > 0; });
      if (s.stopping && s.incoming.empty() && batch.size() == 0) return;
      adds.swap(s.incoming);
    }
    for (auto& add : adds) add(batch);
    try {
      batch.step();  // while stopping, the members' callbacks cancel them
    } catch (const std::exception& e) {  // Batch fails members, not itself: this would be a bug
      std::fprintf(stderr, "error: the batch scheduler: %s\n", e.what());
    }
    s.batch_members = (int)batch.size();
    s.batch_prefilling = batch.prefilling();
  }
}

int Server::bind() {
  Impl& s = *impl_;
  httplib::Server& listener = s.http.listener;
  const int port = s.opts.port == 0 ? listener.bind_to_any_port(s.opts.host)
                                    : (listener.bind_to_port(s.opts.host, s.opts.port) ? s.opts.port : -1);
  if (port < 0) throw Error(s.opts.host + ":" + std::to_string(s.opts.port) + ": cannot listen (address in use or not local)");
  raise_listen_backlog(port, 1024);
  return port;
}

void Server::run() { impl_->http.listener.listen_after_bind(); }

// Called from signal handlers: no lock here. Running generations end at their next token
// ("cancelled"); the destructor wakes the scheduler to finish.
void Server::stop() {
  impl_->scheduler.stopping = true;
  impl_->http.listener.stop();
}

// A generation handed to the scheduler: its text pieces come back here, for the request's thread to
// send; the request's thread cancels it by setting `gone`.
struct Handoff {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::pair<std::string, std::vector<TokenLogprob>>> pieces;  // text, its tokens' logprobs
  std::vector<TokenLogprob> unsent;  // logprobs of tokens whose text is still held back
  bool done = false;
  GenerationResult result;
  std::exception_ptr error;
  std::atomic<bool> gone{false};
  // The context's KV bytes read and tokens evaluated at the first piece of text (the prompt in): the
  // decode steps after it, each one token evaluated, give the KV bytes per step.
  std::optional<std::pair<uint64_t, int64_t>> kv_mark;
};

namespace {

// The generation's text, on the scheduler thread: each piece goes to the request's thread (a stream's
// only); false cancels it (the request's thread gave up, the server stops, or the client hung up).
TextCallback piece_sender(std::shared_ptr<Handoff> h, const Job& job, const Context& ctx,
                          const std::atomic<bool>& stopping) {
  return [h, &job, &ctx, &stopping](std::string_view piece) {
    if (!h->kv_mark) h->kv_mark = {ctx.stats().kv_bytes_read, ctx.n_past()};
    if (h->gone || stopping || job.peer.closed()) return false;
    // A reply sent whole needs only the result: waking its thread for every token cost 8 streams
    // about 5 % of each pass on 2 cores.
    if (!job.request.stream) return true;
    std::lock_guard lock(h->mu);
    h->pieces.emplace_back(piece, std::move(h->unsent));
    h->unsent.clear();
    h->ready.notify_one();
    return true;
  };
}

// The generation's end (its result or its error), on the scheduler thread: it wakes the request's thread.
Batch::DoneCallback result_taker(std::shared_ptr<Handoff> h) {
  return [h](GenerationResult r, std::exception_ptr error) {
    std::lock_guard lock(h->mu);
    h->result = std::move(r);
    h->error = error;
    h->done = true;
    h->ready.notify_one();
  };
}

// What the scheduler runs before its next pass: the job's context joins the batch (or fails at once).
std::function<void(Batch&)> batch_entry(std::shared_ptr<Handoff> h, Job& job, Context& ctx, std::vector<int32_t> to_feed,
                                        const std::atomic<bool>& stopping) {
  return [h, &job, &ctx, &stopping, to_feed = std::move(to_feed)](Batch& batch) mutable {
    TextCallback on_piece = piece_sender(h, job, ctx, stopping);
    GenerationOptions gen = job.request.gen;
    if (gen.logprobs >= 0 && job.request.stream)
      gen.on_logprob = [h](const TokenLogprob& t) {
        std::lock_guard lock(h->mu);
        h->unsent.push_back(t);
      };
    Batch::DoneCallback on_done = result_taker(h);
    try {
      batch.add(ctx, std::move(to_feed), gen, on_piece, on_done);
    } catch (...) {
      on_done({}, std::current_exception());
    }
  };
}

// Sends the pieces as they come (`lock`, on h.mu, let go while each is sent); a failed send (the client
// went away) cancels the generation. The scheduler holds references to the job and the context until it
// is done, so this waits for that even if sending throws.
void send_pieces(Handoff& h, std::unique_lock<std::mutex>& lock, const PieceCallback& on_piece_sent) {
  try {
    for (;;) {
      h.ready.wait(lock, [&] { return h.done || !h.pieces.empty(); });
      while (!h.pieces.empty()) {
        const auto [piece, logprobs] = std::move(h.pieces.front());
        h.pieces.pop_front();
        lock.unlock();
        if (on_piece_sent && !h.gone && !on_piece_sent(piece, logprobs)) h.gone = true;
        lock.lock();
      }
      if (h.done) break;
    }
  } catch (...) {
    h.gone = true;
    if (!lock.owns_lock()) lock.lock();
    h.ready.wait(lock, [&] { return h.done; });
    throw;
  }
}

}  // namespace

// A job's generation: its slot's context prepared, handed to the scheduler, its text sent as it comes.
GenerationResult Server::Impl::generate(Job& job, const PieceCallback& on_piece_sent) {
  if (scheduler.stopping) throw HttpError(503, "the server is stopping");
  std::vector<int32_t> to_feed;
  Context& ctx = prepare(job, to_feed);
  const ContextStats before = ctx.stats();
  show_slot(job, true);
  struct ShownIdleAtExit {  // however this ends, /slots shows the slot free again
    Impl& s;
    const Job& job;
    ~ShownIdleAtExit() { s.show_slot(job, false); }
  } shown{*this, job};
  auto h = std::make_shared<Handoff>();
  hand_over(batch_entry(h, job, ctx, std::move(to_feed), scheduler.stopping));
  std::unique_lock lock(h->mu);
  send_pieces(*h, lock, on_piece_sent);
  return finish_generation(job, ctx, *h, before);
}

// Queues the job's entry for the scheduler's next pass; refused once the server is stopping.
void Server::Impl::hand_over(std::function<void(Batch&)> add) {
  {
    std::lock_guard lock(scheduler.mu);
    if (scheduler.stopping) throw HttpError(503, "the server is stopping");
    scheduler.incoming.push_back(std::move(add));
  }
  scheduler.wake.notify_one();
}

// The generation done (under h.mu): its error thrown, the slot's context dropped with it; or its result,
// with its figures in the job (the reply's timings), the request log and the metrics.
GenerationResult Server::Impl::finish_generation(Job& job, Context& ctx, Handoff& h, const ContextStats& before) {
  if (h.error) {
    slots.state[job.slot->index].ctx.reset();
    std::rethrow_exception(h.error);
  }
  GenerationResult r = std::move(h.result);
  if (h.gone) r.finish_reason = FinishReason::Cancelled;
  const ContextStats after = ctx.stats();
  job.prompt_seconds += after.prompt_seconds - before.prompt_seconds;
  if (h.kv_mark && ctx.n_past() > h.kv_mark->second)
    job.decode_kv_bytes_per_token =
        (double)(after.kv_bytes_read - h.kv_mark->first) / (double)(ctx.n_past() - h.kv_mark->second);
  job.policy_ran = ctx.policy_summary();
  request_log.generated_tokens = r.n_tokens;
  request_log.cancelled = r.finish_reason == FinishReason::Cancelled;
  http.metrics.count_generation((int64_t)job.prompt.size() - job.cached_tokens, r.n_tokens, job.prompt_seconds,
                                after.decode_seconds - before.decode_seconds,
                                job.prompt_kv_bytes + after.kv_bytes_read - before.kv_bytes_read,
                                r.finish_reason == FinishReason::Cancelled);
  return r;
}

}  // namespace fasa
