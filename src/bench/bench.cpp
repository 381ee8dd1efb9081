#include "bench/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include <omp.h>

#include "calib/auto_profile.h"
#include "model/session.h"
#include "select/group_attention.h"
#include "fasa/error.h"
#include "util/memory.h"

namespace fasa {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double BenchResult::mean() const {
  return samples_ts.empty() ? 0 : std::accumulate(samples_ts.begin(), samples_ts.end(), 0.0) / samples_ts.size();
}

double BenchResult::stddev() const {
  if (samples_ts.size() < 2) return 0;
  const double m = mean();
  double s = 0;
  for (double x : samples_ts) s += (x - m) * (x - m);
  return std::sqrt(s / (samples_ts.size() - 1));
}

double BenchResult::median() const {
  if (samples_ts.empty()) return 0;
  std::vector<double> v = samples_ts;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

BenchResult run_bench_test(const Model& model, const PolicyOptions& policy, const BenchTest& t, uint64_t seed) {
  if (t.n_prompt <= 0 && t.n_gen <= 0) throw Error("bench: a test needs prompt or decoded tokens");
  if (t.n_parallel < 1) throw Error("bench: the number of parallel sequences must be positive");
  if (t.device && t.n_parallel > 1) throw Error("bench: -npl with -ngl: the device runs one sequence in this version");
  SessionOptions so = session_options(policy, t.depth + t.n_prompt + t.n_gen + 1);
  so.device = t.device;
  so.n_rewind = t.n_prompt + t.n_gen;  // each repetition goes back to the depth
  std::vector<std::unique_ptr<Session>> seqs;
  AutoProfileStore autos(model);  // FASA's automatic profile, as cached for the model (--profile auto)
  for (int i = 0; i < t.n_parallel; ++i) seqs.push_back(std::make_unique<Session>(model, so, make_policy(policy, model, &autos)));
  std::mt19937 rng((uint32_t)seed);
  std::uniform_int_distribution<int32_t> token(3, model.config.n_vocab - 1);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = token(rng);
    return v;
  };
  if (t.depth > 0)
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (t.random_fill) seqs[i]->fill_random(t.depth, seed + i);
      else seqs[i]->prefill(random_tokens(t.depth));
    }
  // Each sequence's tokens of one step (its prompt, or one decoded token), all in one eval_together.
  std::vector<std::vector<int32_t>> step(seqs.size());
  std::vector<SessionTokens> batch(seqs.size());
  auto eval_step = [&](bool decode) {
    for (size_t i = 0; i < seqs.size(); ++i) batch[i] = {seqs[i].get(), step[i], decode};
    eval_together(batch);
  };
  auto bytes_read = [&] {  // by every sequence's cache
    uint64_t b = 0;
    for (auto& s : seqs) b += s->device() ? s->device()->host_read_bytes() : s->cache().bytes_read();
    return b;
  };
  BenchResult r;
  // Repetition -1 is the warm-up: it pages in the weights, spins up the threads and sizes the
  // scratch buffers for this test's shapes, untimed (as llama-bench's).
  for (int rep = t.warmup ? -1 : 0; rep < t.repetitions; ++rep) {
    for (auto& s : seqs) s->truncate(t.depth);
    std::vector<std::vector<int32_t>> prompts, ids;  // [sequence][token]
    for (size_t i = 0; i < seqs.size(); ++i) prompts.push_back(random_tokens(t.n_prompt)), ids.push_back(random_tokens(t.n_gen));
    const auto t0 = std::chrono::steady_clock::now();
    if (t.n_prompt > 0) {
      step = prompts;
      eval_step(false);
    }
    const uint64_t bytes0 = bytes_read();
    for (int k = 0; k < t.n_gen; ++k) {
      for (size_t i = 0; i < seqs.size(); ++i) step[i] = {ids[i][k]};
      eval_step(true);
    }
    if (rep < 0) continue;
    r.samples_ts.push_back((double)t.n_parallel * (t.n_prompt + t.n_gen) / seconds_since(t0));
    if (t.n_gen > 0) r.kv_bytes_per_token = (double)(bytes_read() - bytes0) / ((double)t.n_gen * t.n_parallel);
  }
  r.memory = seqs[0]->kv_memory();
  r.memory.rss = resident_memory_bytes();
  r.peak_rss = peak_resident_memory_bytes();
  return r;
}

BenchResult run_attention_bench(const Model& model, const PolicyOptions& policy, int64_t depth, int steps,
                                int repetitions, uint64_t seed) {
  const ModelConfig& c = model.config;
  if (depth < 1 || steps < 1) throw Error("attention bench: the depth and the steps must be positive");
  AutoProfileStore autos(model);  // FASA's automatic profile, as cached for the model (--profile auto)
  const std::unique_ptr<AttentionPolicy> attn_policy = make_policy(policy, model, &autos);
  int layer = c.n_layer > 1 ? 1 : 0;  // layer 0 is FASA's default dense layer; a sliding one never meets the policy
  while (c.sliding(layer) && layer + 1 < c.n_layer) ++layer;
  const int D = c.head_dim, HKV = c.n_head_kv, group = c.n_head / c.n_head_kv;
  std::vector<KeyLayout> layouts;
  for (int g = 0; g < HKV; ++g) layouts.push_back(attn_policy->key_layout(layer, g));
  const SessionOptions so = session_options(policy, depth);
  KvCache cache(1, HKV, D, depth, layouts, so.cache.types, so.cache.offload);  // the one layer's cache
  cache.fill_random(0, depth, seed);
  std::mt19937 rng((uint32_t)seed);
  std::normal_distribution<float> normal;
  std::vector<float> q((size_t)steps * c.n_head * D);  // [steps, n_head, D] a query per step, model order
  for (float& x : q) x = normal(rng);
  std::vector<float> out((size_t)c.n_head * D);        // [n_head, D]
  const float scale = c.attention_scale();
  auto step = [&](int i) {  // every query head of the layer, threads over KV heads as in a decode step
    cache.begin_decode_layer(0);
#pragma omp parallel
    {
      std::vector<float> qg((size_t)group * D);  // [group, D] in the cache's dim order
      GroupAttentionScratch scratch;
#pragma omp for schedule(dynamic)
      for (int g = 0; g < HKV; ++g) {
        for (int h = 0; h < group; ++h)
          cache.permute_query(0, g, &q[((size_t)i * c.n_head + g * group + h) * D], &qg[(size_t)h * D]);
        decode_group_attention(*attn_policy, layer, g, depth - 1, cache, 0, qg.data(), group, scale,
                               &out[(size_t)g * group * D], scratch);
      }
    }
  };
  step(0);  // warm-up
  BenchResult r;
  for (int rep = 0; rep < repetitions; ++rep) {
    const uint64_t bytes0 = cache.bytes_read();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(i);
    r.samples_ts.push_back(steps / seconds_since(t0));
    r.kv_bytes_per_token = (double)(cache.bytes_read() - bytes0) / steps;
  }
  r.peak_rss = peak_resident_memory_bytes();
  return r;
}

namespace {

// Sums floats [lo, hi) as kStreams interleaved sub-ranges with independent accumulators: one
// sequential stream with one dependency chain per thread stays latency-bound (few misses in flight)
// and under-reads what decode's matmuls, which walk many weight rows at once, actually achieve.
float sum_streams(const float* a, size_t lo, size_t hi) {
  constexpr int kStreams = 4, kLanes = 16;
  const size_t len = (hi - lo) / (kStreams * kLanes) * kLanes;  // per stream, whole lane blocks
  float acc[kStreams][kLanes] = {};
  for (size_t i = 0; i < len; i += kLanes)
    for (int s = 0; s < kStreams; ++s) {
      const float* p = a + lo + (size_t)s * len + i;
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) acc[s][j] += p[j];
    }
  float total = 0;
  for (size_t i = lo + (size_t)kStreams * len; i < hi; ++i) total += a[i];  // the tail
  for (auto& row : acc)
    for (float v : row) total += v;
  return total;
}

}  // namespace

std::vector<double> measure_read_bandwidth(size_t bytes, int repetitions) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n);  // [n], 1 GiB by default: far past every cache
  std::vector<double> out;
  volatile float sink = 0;
  for (int rep = 0; rep <= repetitions; ++rep) {  // rep 0 warms up: first touch by the reading thread
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      if (rep == 0)
        for (size_t i = lo; i < hi; ++i) a[i] = (float)(i & 7);
      total += sum_streams(a.data(), lo, hi);
    }
    if (rep > 0) out.push_back((double)n * sizeof(float) / seconds_since(t0));
    sink = sink + total;
  }
  return out;
}

}  // namespace fasa
