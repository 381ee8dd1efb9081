// `fasa bench`: llama-bench-style speed rows for each attention policy and depth, with the KV bytes
// the attention kernels read per decoded token and the bandwidth that implies. This file parses the
// command line into a BenchPlan; src/bench/bench_rows.cpp runs and renders it.
#include <omp.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "api/kv_memory_report.h"
#include "bench/bench_rows.h"
#include "gpu/device_loader.h"
#include "model/model.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {

struct BenchOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::vector<int> n_prompts = {512}, n_gens = {128}, threads = {0};  // comma lists, as llama-bench's
  int repetitions = 5;
  bool warmup = true;
  std::vector<int64_t> depths = {0};
  std::vector<int> parallel = {1};  // sequences processed together (llama-batched-bench's -npl)
  std::vector<std::string> pgs;  // "N,M": prefill N tokens then decode M, timed together
  std::vector<std::string> attns = {kDenseAttn, kFasaAttn};
  std::string fill = "prefill", output = "md";
  bool membw = false;
  bool attention_only = false;  // time one layer's decode attention instead of whole decode steps
  std::vector<std::string> offloads = {"none"};  // FASA rows per KV placement: none, ram, file:DIR
  std::vector<std::string> prefetches = {"off"};  // ... and with the prefetch thread on and/or off
  PolicyOptions policy;
  EngineOptions gpu;  // -ngl, --device, and the mapping flags
};

int membw(int repetitions) {
  const size_t bytes = (size_t)1 << 30;
  BenchResult r;
  r.samples_ts = measure_read_bandwidth(bytes, repetitions);
  std::printf("| test | threads | GB/s (mean ± std) | median |\n|---|---|---|---|\n");
  std::printf("| read 1 GiB | %d | %.2f ± %.2f | %.2f |\n", omp_get_max_threads(), r.mean() / 1e9, r.stddev() / 1e9,
              r.median() / 1e9);
  return 0;
}

int bench(BenchOptions o) {
  if (o.membw) {
    if (o.threads[0] > 0) omp_set_num_threads(o.threads[0]);
    return membw(o.repetitions);
  }
  if (o.fill != "prefill" && o.fill != "random") throw Error("--fill must be 'prefill' or 'random'");
  if (o.output != "md" && o.output != "csv" && o.output != "json" && o.output != "jsonl")
    throw Error("-o must be md, csv, json or jsonl");
  auto model = load_model(o.model, {.pack_for_cpu = o.gpu.gpu_layers == 0, .mmap = o.gpu.mmap, .mlock = o.gpu.mlock});
  const auto device = gpu::load_device_model(*model, o.gpu.gpu_layers, o.gpu.device);
  if (device) std::fprintf(stderr, "device: %s\n", device->describe().c_str());

  std::vector<std::pair<int, int>> tests;  // (prompt tokens, decoded tokens) of each test
  for (int n : o.n_prompts)
    if (n > 0) tests.emplace_back(n, 0);
  for (int n : o.n_gens)
    if (n > 0) tests.emplace_back(0, n);
  for (const std::string& pg : o.pgs) {
    int n = 0, m = 0;
    char end = 0;
    if (std::sscanf(pg.c_str(), "%d,%d%c", &n, &m, &end) != 2 || n < 1 || m < 1 || n > (1 << 20) || m > (1 << 20))
      throw Error("-pg wants N,M (prompt tokens, then decoded tokens; both positive), not '" + pg + "'");
    tests.emplace_back(n, m);
  }

  BenchPlan plan;
  plan.threads = o.threads;
  plan.policies = bench_policies(o.policy, o.attns, o.offloads, o.prefetches);
  plan.depths = o.depths;
  plan.parallel = o.parallel;
  plan.tests = tests;
  plan.repetitions = o.repetitions;
  plan.warmup = o.warmup;
  plan.random_fill = o.fill == "random";
  plan.attention_only = o.attention_only;
  plan.device = device.get();
  const auto rows = run_bench_plan(*model, plan, [&](const BenchRow& r) {
    std::fprintf(stderr, "%s %s, %d threads: %.2f %s\n", bench_label(r.policy, r.fcs).c_str(), r.test.c_str(), r.threads,
                 r.result.mean(), o.attention_only ? "steps/s" : "t/s");
    if (!o.attention_only && (r.policy.cache.offload.offloaded() || r.policy.cache.offload.fast_limit > 0))
      std::fprintf(stderr, "  %s\n", kv_memory_line(r.result.memory).c_str());
  });
  const BenchRunInfo info{o.model, model.get(), &o.policy, &plan};
  std::fputs(render_bench_rows(rows, info, o.output).c_str(), stdout);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prompt and decode speed per attention policy and depth (llama-bench rows)");
  add_model_option(cmd, o->model);
  cmd->add_option("-p,--n-prompt", o->n_prompts, "Prompt tokens per pp test, comma-separated (0: none)")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--n-gen", o->n_gens, "Decoded tokens per tg test, comma-separated (0: none)")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--pg", o->pgs, "Prefill N tokens then decode M, timed together: N,M (as llama-bench's -pg, "
                 "which also works); t/s counts both, notes give the total time");
  cmd->add_option("--npl,--n-parallel", o->parallel,
                  "Sequences processed together, comma-separated (as llama-batched-bench's -npl): each at the "
                  "depth with its own cache, prompts prefilled together, decode steps batched; t/s is their aggregate")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("-d,--n-depth", o->depths, "Depths (tokens already cached), comma-separated")
      ->delimiter(',')->capture_default_str()->check(CLI::Range((int64_t)0, (int64_t)1 << 26));
  cmd->add_option("--attn", o->attns, "Policies, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Repetitions of each test")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("-o,--output", o->output, "md, csv, json or jsonl")->capture_default_str();
  cmd->add_flag_callback("--no-warmup", [o] { o->warmup = false; }, "No untimed run of each test before its repetitions");
  cmd->add_option("--fill", o->fill, "How the depth is filled: 'prefill' (random tokens) or 'random' K/V")->capture_default_str();
  add_threads_option(cmd, o->threads);
  cmd->add_flag("--membw", o->membw, "Only measure memory read bandwidth (STREAM-like sum over 1 GiB)");
  cmd->add_flag("--attention-only", o->attention_only,
                "Time one layer's decode attention (all its heads, random K/V at each depth) for -n steps");
  add_policy_options(cmd, o->policy, kBudget);
  add_gpu_options(cmd, o->gpu);
  add_mapping_options(cmd, o->gpu);
  add_ignored_llama_options(cmd, kGpuFlags | kBatchFlags);
  cmd->add_option("--kv-offload", o->offloads,
                  "FASA rows per KV placement, comma-separated: none (resident, FASA-C), ram, file:DIR (FASA-M)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--kv-prefetch", o->prefetches, "FASA-M rows with the prefetch thread: on, off, or on,off")
      ->delimiter(',')->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  return {cmd, [o] { return bench(*o); }};
}

}  // namespace fasa::cli
