#pragma once
// Speed measurements behind `fasa bench`: prompt processing and decoding at a depth, as llama-bench
// runs them, plus the KV bytes the attention kernels read per decoded token and a STREAM-like read
// bandwidth measurement (the floor decode speed is judged against).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fasa/kv_memory.h"
#include "model/device.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace fasa {

struct BenchTest {
  int n_prompt = 0;       // > 0: a prompt-processing test of this many tokens
  int n_gen = 0;          // > 0: a decode test of this many tokens (both: prefill, then decode, timed
                          // together as llama-bench's -pg; t/s counts both)
  int n_parallel = 1;     // sequences processed together (llama-batched-bench's -npl), each with its own
                          // cache at `depth`: prompts prefilled in one pass, decode steps batched; t/s
                          // counts all the sequences' tokens
  int64_t depth = 0;      // tokens already in the cache
  bool random_fill = false;  // fill the depth with random K/V instead of a prefill
  int repetitions = 5;
  bool warmup = true;     // one untimed run of the whole test first (the first timed one was slower)
  const DeviceModel* device = nullptr;  // where the sessions run (-ngl): null the CPU; one sequence there
};

struct BenchResult {
  std::vector<double> samples_ts;        // tokens/s of each repetition
  double kv_bytes_per_token = 0;         // decode tests: KV bytes read per decoded token (of one sequence;
                                         // on a device: FASA-M's from host memory, the rest not counted)
  KvMemory memory;                       // the (first sequence's) cache's placement after the last repetition
  size_t peak_rss = 0;                   // the process's peak resident bytes when the test ended (covers earlier tests)
  double mean() const;
  double stddev() const;
  double median() const;
};

// One test with fresh sessions of `policy` (the depth is filled once, each repetition starts from it).
BenchResult run_bench_test(const Model& model, const PolicyOptions& policy, const BenchTest& test, uint64_t seed);

// One layer's decode attention alone (what FASA changes): every query head of a sparse layer attends,
// through `policy`, over `depth` cached tokens of random K/V; steps/s per repetition of `steps`
// steps, and the KV bytes a step reads.
BenchResult run_attention_bench(const Model& model, const PolicyOptions& policy, int64_t depth, int steps,
                                int repetitions, uint64_t seed);

// Read bandwidth of `bytes` of memory summed by all threads, bytes/s per repetition.
std::vector<double> measure_read_bandwidth(size_t bytes, int repetitions);

}  // namespace fasa
