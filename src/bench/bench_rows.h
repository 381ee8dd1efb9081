#pragma once
// `fasa bench` as a library: the test matrix a command line expands to, run row by row, and the rows
// as llama-bench prints them (markdown, CSV, JSON, JSON lines). The CLI only parses options.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.h"

namespace fasa {

struct BenchPlan {
  std::vector<int> threads = {0};          // thread counts; 0: all cores
  std::vector<PolicyOptions> policies;     // each policy variant (FASA once per KV placement)
  std::vector<int64_t> depths = {0};
  std::vector<int> parallel = {1};         // sequences processed together (-npl)
  std::vector<std::pair<int, int>> tests;  // (prompt tokens, decoded tokens); both > 0: llama-bench's -pg
  int repetitions = 5;
  bool warmup = true;
  bool random_fill = false;     // fill the depth with random K/V instead of a prefill
  bool attention_only = false;  // time one layer's decode attention for n_gen steps, not whole steps
  const DeviceModel* device = nullptr;  // -ngl: the sessions on this device (whole steps, one sequence)
};

struct BenchRow {
  std::string test;  // "pp512", "tg128 @ d4096", "pp8192+tg256", "attn x20 @ d32768", "tg32 x8" (8 sequences)
  PolicyOptions policy;
  int fcs = 0;       // FASA's chunks per head as used (fasa_chunks: 0 where each layer takes its profile's choice)
  int threads = 0;
  BenchTest spec;
  BenchResult result;
};

// The policies a bench runs over `base`: each of `attns`, FASA (and DoubleSparse) once per KV placement
// of `offloads` ("none", "ram", "file:DIR") and, offloaded, per prefetch setting ("on", "off"). Without
// a profile they score on seeded random chunks (the speed is the same).
std::vector<PolicyOptions> bench_policies(const PolicyOptions& base, const std::vector<std::string>& attns,
                                          const std::vector<std::string>& offloads,
                                          const std::vector<std::string>& prefetches);

// Every (threads, policy, sequences, depth, test) combination; on_row sees each row as soon as it is
// measured. Throws fasa::Error for an attention-only plan without a decode test.
std::vector<BenchRow> run_bench_plan(const Model& model, const BenchPlan& plan,
                                     const std::function<void(const BenchRow&)>& on_row);

// What the renderings say about the run as a whole.
struct BenchRunInfo {
  std::string model_path;
  const Model* model = nullptr;
  const PolicyOptions* policy = nullptr;  // the shared options: KV type, budget, chunk sharing
  const BenchPlan* plan = nullptr;        // what ran: repetitions, attention-only or whole steps
};

// The attn column: policy, budget, chunks, and for FASA-M where K_rest and V live.
std::string bench_label(const PolicyOptions& p, int fcs);
// format: md, csv, json or jsonl (throws fasa::Error otherwise).
std::string render_bench_rows(const std::vector<BenchRow>& rows, const BenchRunInfo& info, const std::string& format);

}  // namespace fasa
