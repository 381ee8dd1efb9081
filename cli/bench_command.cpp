// `fasa bench`: llama-bench-style speed rows for each attention policy and depth, with the KV bytes
// the attention kernels read per decoded token and the bandwidth that implies.
#include <omp.h>

#include <cstdio>
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "eval/bench.h"
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
  std::vector<std::string> pgs;  // "N,M": prefill N tokens then decode M, timed together
  std::vector<std::string> attns = {"full", "fasa"};
  std::string fill = "prefill", output = "md";
  bool membw = false;
  bool attention_only = false;  // time one layer's decode attention instead of whole decode steps
  std::vector<std::string> offloads = {"none"};  // FASA rows per KV placement: none, ram, file:DIR
  std::vector<std::string> prefetches = {"on"};  // ... and with the prefetch thread on and/or off
  PolicyOptions policy;
};

struct Row {
  std::string attn, test;
  PolicyOptions policy;
  int fcs = 0;  // FASA's chunks per head as used (resolved from the profile or the synthetic default)
  int threads = 0;
  BenchTest spec;
  BenchResult result;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int membw(int repetitions) {
  const size_t bytes = (size_t)1 << 30;
  BenchResult r;
  r.samples_ts = measure_read_bandwidth(bytes, repetitions);
  std::printf("| test | threads | GB/s (mean ± std) | median |\n|---|---|---|---|\n");
  std::printf("| read 1 GiB | %d | %.2f ± %.2f | %.2f |\n", omp_get_max_threads(), r.mean() / 1e9, r.stddev() / 1e9,
              r.median() / 1e9);
  return 0;
}

// The policies a bench runs: each --attn name, FASA once per KV placement (and prefetch setting).
std::vector<PolicyOptions> variants(const BenchOptions& o) {
  std::vector<PolicyOptions> out;
  for (const std::string& attn : o.attns) {
    PolicyOptions p = o.policy;
    p.attn = attn;
    if (!policy_info(attn).has_k_dom) {
      out.push_back(p);
      continue;
    }
    for (const std::string& off : o.offloads) {
      p.kv_offload = off == "none" ? "" : off;
      for (const std::string& pf : p.kv_offload.empty() ? std::vector<std::string>{"on"} : o.prefetches) {
        p.kv_prefetch = pf == "on";
        out.push_back(p);
      }
    }
  }
  return out;
}

// The attn column: policy, budget, chunks, and for FASA-M where K_rest and V live.
std::string attn_label(const PolicyOptions& p, int fcs) {
  if (policy_info(p.attn).dense) return p.attn;
  std::string s = p.attn + " b" + p.budget + (fcs ? " fcs" + std::to_string(fcs) : "");
  if (!p.kv_offload.empty()) s += " M:" + p.kv_offload.substr(0, p.kv_offload.find(':')) + (p.kv_prefetch ? "" : " no-pf");
  return s;
}

// The budget as JSON: a token count or a fraction of the context, a number either way.
nlohmann::json budget_json(const std::string& b) {
  char* end = nullptr;
  const double v = std::strtod(b.c_str(), &end);
  return end && *end == 0 ? nlohmann::json(v == (double)(int64_t)v ? nlohmann::json((int64_t)v) : nlohmann::json(v))
                          : nlohmann::json(b);
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A CSV cell: quoted when it holds a comma or a quote.
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

int bench(BenchOptions o) {
  if (o.membw) {
    if (o.threads[0] > 0) omp_set_num_threads(o.threads[0]);
    return membw(o.repetitions);
  }
  if (o.fill != "prefill" && o.fill != "random") throw Error("--fill must be 'prefill' or 'random'");
  if (o.output != "md" && o.output != "csv" && o.output != "json" && o.output != "jsonl")
    throw Error("-o must be md, csv, json or jsonl");
  auto model = load_model(o.model);
  const std::string name = std::filesystem::path(o.model).filename().string();
  const double size_gib = model->weight_bytes() / 1073741824.0, params_b = model->n_params() / 1e9;
  const bool synthetic = o.policy.profile.empty();
  o.policy.synthetic_profile = synthetic;

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
  if (o.attention_only && std::find_if(tests.begin(), tests.end(), [](auto t) { return t.second > 0; }) == tests.end())
    throw Error("--attention-only times -n decode steps; -n must be positive");

  std::vector<Row> rows;
  const int all_cores = omp_get_max_threads();
  for (int nt : o.threads) {
    omp_set_num_threads(nt > 0 ? nt : all_cores);
    for (const PolicyOptions& p : variants(o)) {
      const int fcs = fasa_chunks(p, *model);  // reads the profile: once per variant, not per row
      for (int64_t depth : o.depths)
        for (const auto& [n_prompt, n_gen] : tests) {
          if (o.attention_only && (n_prompt > 0 || n_gen == 0)) continue;
          Row row;
          row.attn = p.attn;
          row.policy = p;
          row.fcs = fcs;
          row.threads = omp_get_max_threads();
          row.spec.depth = depth;
          row.spec.random_fill = o.attention_only || o.fill == "random";
          row.spec.repetitions = o.repetitions;
          row.spec.warmup = o.warmup || o.attention_only;  // the attention bench always warms up one step
          row.spec.n_prompt = n_prompt;
          row.spec.n_gen = n_gen;
          if (o.attention_only) {
            row.test = "attn x" + std::to_string(n_gen) + " @ d" + std::to_string(depth);
            row.result = run_attention_bench(*model, p, depth, n_gen, o.repetitions, 1);
          } else {
            row.test = (n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "") + (n_prompt > 0 && n_gen > 0 ? "+" : "") +
                       (n_gen > 0 ? "tg" + std::to_string(n_gen) : "") + (depth > 0 ? " @ d" + std::to_string(depth) : "");
            row.result = run_bench_test(*model, p, row.spec, 1);
          }
          std::fprintf(stderr, "%s %s, %d threads: %.2f %s\n", attn_label(p, row.fcs).c_str(), row.test.c_str(),
                       row.threads, row.result.mean(), o.attention_only ? "steps/s" : "t/s");
          if (!o.attention_only && (!p.kv_offload.empty() || !p.kv_fast_limit.empty()))
            std::fprintf(stderr, "  %s\n", kv_memory_line(row.result.memory).c_str());
          rows.push_back(std::move(row));
        }
    }
  }

  const double weight_bytes = (double)model->weight_bytes();
  auto notes = [&](const Row& r) {
    std::string n = "KV " + o.policy.kv_type;
    if (r.spec.depth > 0) n += r.spec.random_fill ? ", random fill" : ", prefill";
    if (policy_info(r.attn).has_k_dom && synthetic) n += ", synthetic profile";
    if (r.spec.n_prompt > 0 && r.spec.n_gen > 0)  // what a user waits for: the whole prefill + decode
      n += ", total " + fmt("%.2f", (r.spec.n_prompt + r.spec.n_gen) / r.result.median()) + " s (median)";
    if (!r.policy.kv_offload.empty() && !o.attention_only) {
      const KvMemory& m = r.result.memory;
      n += ", KV MiB fast " + fmt("%.1f", m.fast / 1048576.0) + " / slow " + fmt("%.1f", m.slow / 1048576.0) +
           " / dense " + fmt("%.1f", m.full / 1048576.0);
      if (r.policy.kv_prefetch) n += ", prefetch hits " + fmt("%.1f", 100 * m.rows.hit_rate()) + "%";
    }
    if (o.attention_only) {
      n += ", one layer's attention";
      for (const Row& full : rows)  // the speed-up over dense attention at the same depth
        if (!policy_info(r.attn).dense && policy_info(full.attn).dense && full.spec.depth == r.spec.depth && full.threads == r.threads &&
            full.spec.n_gen == r.spec.n_gen &&
            full.result.median() > 0)
          n += ", " + fmt("%.2fx", r.result.median() / full.result.median()) + " full";
    }
    return n;
  };
  auto gbps = [&](const Row& r) {  // bytes a decode step reads (weights + counted KV) times steps/s
    const double weights = o.attention_only ? 0.0 : weight_bytes;
    const bool decode_only = r.spec.n_gen > 0 && r.spec.n_prompt == 0;
    return decode_only ? (weights + r.result.kv_bytes_per_token) * r.result.mean() / 1e9 : 0.0;
  };
  if (o.output == "json" || o.output == "jsonl") {
    nlohmann::json out = nlohmann::json::array();
    const std::string cpu = cpu_name(), when = utc_now();
    for (const Row& r : rows) {
      out.push_back({{"build_version", FASA_VERSION}, {"cpu_info", cpu}, {"backends", "CPU"}, {"test_time", when},
                     {"model_filename", o.model}, {"model_type", model->config.arch}, {"model_size", model->weight_bytes()},
                     {"model_n_params", model->n_params()}, {"n_threads", r.threads}, {"n_prompt", r.spec.n_prompt},
                     {"n_gen", r.spec.n_gen}, {"n_depth", r.spec.depth}, {"repetitions", o.repetitions},
                     {"warmup", r.spec.warmup}, {"avg_ts", r.result.mean()}, {"stddev_ts", r.result.stddev()},
                     {"median_ts", r.result.median()}, {"samples_ts", r.result.samples_ts}, {"attn", r.attn},
                     {"budget", policy_info(r.attn).dense ? nlohmann::json(nullptr) : budget_json(o.policy.budget)},
                     {"fcs", r.fcs}, {"fc_sharing", o.policy.fc_sharing},
                     {"fill", r.spec.depth > 0 ? (r.spec.random_fill ? "random" : "prefill") : ""},
                     {"synthetic_profile", policy_info(r.attn).has_k_dom && synthetic}, {"type_k", o.policy.kv_type},
                     {"type_v", o.policy.kv_type},
                     {"kv_bytes_read_per_token", r.result.kv_bytes_per_token}, {"achieved_gbps", gbps(r)},
                     {"kv_offload", r.policy.kv_offload}, {"kv_prefetch", !r.policy.kv_offload.empty() && r.policy.kv_prefetch}});
      if (!o.attention_only) out.back().update(kv_memory_json(r.result.memory));
    }
    if (o.output == "json") std::printf("%s\n", out.dump(2).c_str());
    else for (const auto& row : out) std::printf("%s\n", row.dump().c_str());  // one object per line
    return 0;
  }
  if (o.output == "csv") {  // numbers only in numeric columns, units in the header
    std::printf("model,size_gib,params_b,attn,budget,fcs,threads,test,n_prompt,n_gen,n_depth,avg_ts,stddev_ts,median_ts,"
                "kv_mib_per_token,gbps,notes\n");
    for (const Row& r : rows)
      std::printf("%s,%.4f,%.4f,%s,%s,%d,%d,%s,%d,%d,%lld,%.3f,%.3f,%.3f,%s,%s,%s\n", csv_cell(name).c_str(), size_gib,
                  params_b, r.attn.c_str(), policy_info(r.attn).dense ? "" : csv_cell(o.policy.budget).c_str(), r.fcs, r.threads,
                  csv_cell(r.test).c_str(), r.spec.n_prompt, r.spec.n_gen, (long long)r.spec.depth, r.result.mean(),
                  r.result.stddev(), r.result.median(),
                  r.spec.n_gen > 0 ? fmt("%.4f", r.result.kv_bytes_per_token / 1048576.0).c_str() : "",
                  gbps(r) > 0 ? fmt("%.2f", gbps(r)).c_str() : "", csv_cell(notes(r)).c_str());
    return 0;
  }
  std::printf("| model | size | params | attn | threads | test | t/s | KV MiB/token | GB/s | notes |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f | %s | %s | %s |\n", name.c_str(), size_gib, params_b,
                attn_label(r.policy, r.fcs).c_str(), r.threads, r.test.c_str(), r.result.mean(), r.result.stddev(),
                r.spec.n_gen > 0 ? fmt("%.2f", r.result.kv_bytes_per_token / 1048576.0).c_str() : "",
                gbps(r) > 0 ? fmt("%.1f", gbps(r)).c_str() : "", notes(r).c_str());
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
  cmd->add_option("-d,--n-depth", o->depths, "Depths (tokens already cached), comma-separated")
      ->delimiter(',')->capture_default_str()->check(CLI::Range((int64_t)0, (int64_t)1 << 26));
  cmd->add_option("--attn", o->attns, "Policies, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Repetitions of each test")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("-o,--output", o->output, "md, csv, json or jsonl")->capture_default_str();
  cmd->add_flag("!--no-warmup", o->warmup, "No untimed run of each test before its repetitions");
  cmd->add_option("--fill", o->fill, "How the depth is filled: 'prefill' (random tokens) or 'random' K/V")->capture_default_str();
  add_threads_option(cmd, o->threads);
  cmd->add_flag("--membw", o->membw, "Only measure memory read bandwidth (STREAM-like sum over 1 GiB)");
  cmd->add_flag("--attention-only", o->attention_only,
                "Time one layer's decode attention (all its heads, random K/V at each depth) for -n steps");
  add_policy_options(cmd, o->policy, kBudget);
  add_gpu_options(cmd);
  cmd->add_option("--kv-offload", o->offloads,
                  "FASA rows per KV placement, comma-separated: none (resident, FASA-C), ram, file:DIR (FASA-M)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--kv-prefetch", o->prefetches, "FASA-M rows with the prefetch thread: on, off, or on,off")
      ->delimiter(',')->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  return {cmd, [o] { return bench(*o); }};
}

}  // namespace fasa::cli
