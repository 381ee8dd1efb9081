#include "bench/bench_rows.h"

#include <omp.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "api/kv_memory_report.h"
#include "fasa/error.h"
#include "model/session.h"
#include "sparse/fasa.h"

namespace fasa {

namespace {

// printf into a string of whatever length it needs.
__attribute__((format(printf, 1, 2))) std::string fmt(const char* f, ...) {
  va_list a, b;
  va_start(a, f);
  va_copy(b, a);
  const int n = std::vsnprintf(nullptr, 0, f, a);
  va_end(a);
  std::string s(n > 0 ? (size_t)n : 0, '\0');
  std::vsnprintf(s.data(), s.size() + 1, f, b);
  va_end(b);
  return s;
}

// The budget as JSON: a token count or a fraction of the context, a number either way.
nlohmann::json budget_json(const Budget& b) {
  return b.fraction ? nlohmann::json(b.value) : nlohmann::json((int64_t)b.value);
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

}  // namespace

std::string bench_label(const PolicyOptions& p, int fcs) {
  if (policy_info(p.attn).dense) return p.attn;
  std::string s = p.attn + " b" + p.budget.str() + (fcs ? " fcs" + std::to_string(fcs) : "");
  if (const std::string where = offload_str(p.cache.offload); !where.empty())
    s += " M:" + where.substr(0, where.find(':')) + (p.cache.offload.prefetch ? " pf" : "");
  return s;
}

std::vector<PolicyOptions> bench_policies(const PolicyOptions& base, const std::vector<std::string>& attns,
                                          const std::vector<std::string>& offloads,
                                          const std::vector<std::string>& prefetches) {
  std::vector<PolicyOptions> out;
  for (const std::string& attn : attns) {
    PolicyOptions p = base;
    set_policy_option(p, "attn", attn);
    p.synthetic_profile = p.profile.empty();
    if (!policy_info(attn).has_k_dom) {  // only K_dom policies' rows are offloaded
      set_policy_option(p, "kv_offload", "none");
      set_policy_option(p, "kv_prefetch", "off");
      out.push_back(p);
      continue;
    }
    for (const std::string& off : offloads) {
      set_policy_option(p, "kv_offload", off);
      for (const std::string& pf : p.cache.offload.offloaded() ? prefetches : std::vector<std::string>{"off"}) {
        set_policy_option(p, "kv_prefetch", pf);
        out.push_back(p);
      }
    }
  }
  return out;
}

std::vector<BenchRow> run_bench_plan(const Model& model, const BenchPlan& plan,
                                     const std::function<void(const BenchRow&)>& on_row) {
  if (plan.attention_only && std::none_of(plan.tests.begin(), plan.tests.end(), [](auto t) { return t.second > 0; }))
    throw Error("--attention-only times -n decode steps; -n must be positive");
  if (plan.attention_only && plan.device) throw Error("--attention-only times the CPU's kernels: without -ngl");
  std::vector<BenchRow> rows;
  const int all_cores = omp_get_max_threads();
  for (int nt : plan.threads) {
    omp_set_num_threads(nt > 0 ? nt : all_cores);
    for (const PolicyOptions& p : plan.policies) {
      const int fcs = fasa_chunks(p, model);  // reads the profile: once per variant, not per row
      for (int npl : plan.parallel)
      for (int64_t depth : plan.depths)
        for (const auto& [n_prompt, n_gen] : plan.tests) {
          if (plan.attention_only && (n_prompt > 0 || n_gen == 0 || npl > 1)) continue;
          BenchRow row;
          row.spec.n_parallel = npl;
          row.policy = p;
          row.fcs = fcs;
          row.threads = omp_get_max_threads();
          row.spec.depth = depth;
          row.spec.random_fill = plan.attention_only || plan.random_fill;
          row.spec.repetitions = plan.repetitions;
          row.spec.warmup = plan.warmup || plan.attention_only;  // the attention bench always warms up one step
          row.spec.n_prompt = n_prompt;
          row.spec.n_gen = n_gen;
          row.spec.device = plan.device;
          if (plan.attention_only) {
            row.test = "attn x" + std::to_string(n_gen) + " @ d" + std::to_string(depth);
            row.result = run_attention_bench(model, p, depth, n_gen, plan.repetitions, 1);
          } else {
            row.test = (n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "") + (n_prompt > 0 && n_gen > 0 ? "+" : "") +
                       (n_gen > 0 ? "tg" + std::to_string(n_gen) : "") + (npl > 1 ? " x" + std::to_string(npl) : "") +
                       (depth > 0 ? " @ d" + std::to_string(depth) : "");
            row.result = run_bench_test(model, p, row.spec, 1);
          }
          on_row(row);
          rows.push_back(std::move(row));
        }
    }
  }
  return rows;
}

namespace {

// The notes column: fill, profile, total time of -pg tests, FASA-M memory, attention speed-up.
std::string row_notes(const BenchRow& r, const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  const PolicyOptions& p = *info.policy;
  const CacheOptions& c = p.cache;
  std::string n = std::string("KV ") + name_of(c.types.k) + (c.types.k == c.types.v ? "" : std::string("/") + name_of(c.types.v));
  if (c.types.tip_int8 && policy_info(r.policy.attn).has_k_dom) n += ", int8 TIP";
  if (r.spec.depth > 0) n += r.spec.random_fill ? ", random fill" : ", prefill";
  if (r.spec.device) n += ", on the GPU";
  if (policy_info(r.policy.attn).has_k_dom && r.policy.synthetic_profile) n += ", synthetic profile";
  if (r.spec.n_prompt > 0 && r.spec.n_gen > 0)  // what a user waits for: the whole prefill + decode
    n += ", total " + fmt("%.2f", (r.spec.n_prompt + r.spec.n_gen) / r.result.median()) + " s (median)";
  if (r.policy.cache.offload.offloaded() && !info.plan->attention_only) {
    const KvMemory& m = r.result.memory;
    n += std::string(r.spec.device ? ", KV MiB GPU " : ", KV MiB fast ") + fmt("%.1f", (m.fast + m.device) / 1048576.0) +
         (r.spec.device ? " / host " : " / slow ") + fmt("%.1f", m.slow / 1048576.0) + " / dense " + fmt("%.1f", m.full / 1048576.0);
    if (r.policy.cache.offload.prefetch) n += ", prefetch hits " + fmt("%.1f", 100 * m.rows.hit_rate()) + "%";
  }
  if (info.plan->attention_only) {
    n += ", one layer's attention";
    for (const BenchRow& full : rows)  // the speed-up over dense attention at the same depth
      if (!policy_info(r.policy.attn).dense && policy_info(full.policy.attn).dense && full.spec.depth == r.spec.depth &&
          full.threads == r.threads && full.spec.n_gen == r.spec.n_gen && full.result.median() > 0)
        n += ", " + fmt("%.2fx", r.result.median() / full.result.median()) + " full";
  }
  return n;
}

// Whether the row's KV bytes per token were counted: decode tests on the CPU; on the GPU, FASA-M's
// reads from host memory only.
bool kv_counted(const BenchRow& r) { return r.spec.n_gen > 0 && (!r.spec.device || r.policy.cache.offload.offloaded()); }

// Bytes a decode step reads (weights once, every sequence's counted KV) times steps/s; 0 for tests that
// prefill, and on the GPU (its reads are not counted).
// A mixture of experts counts one token's experts (several sequences may read more of them).
double row_gbps(const BenchRow& r, const BenchRunInfo& info) {
  const double weights = info.plan->attention_only ? 0.0 : (double)info.model->weight_bytes(true);
  const bool decode_only = r.spec.n_gen > 0 && r.spec.n_prompt == 0 && !r.spec.device;
  const int seqs = r.spec.n_parallel;
  return decode_only ? (weights + seqs * r.result.kv_bytes_per_token) * r.result.mean() / seqs / 1e9 : 0.0;
}

std::string render_json(const std::vector<BenchRow>& rows, const BenchRunInfo& info, bool lines) {
  const Model& model = *info.model;
  const PolicyOptions& shared = *info.policy;
  const std::string cpu = cpu_name(), when = utc_now();
  std::string out;
  nlohmann::json all = nlohmann::json::array();
  for (const BenchRow& r : rows) {
    const PolicyInfo& pol = policy_info(r.policy.attn);
    const DeviceModel* gpu = r.spec.device;
    nlohmann::json j = {{"build_version", FASA_VERSION}, {"cpu_info", cpu}, {"backends", gpu ? "Vulkan" : "CPU"},
                        {"gpu_info", gpu ? gpu->describe() : ""}, {"n_gpu_layers", gpu ? model.config.n_layer : 0},
                        {"test_time", when},
                        {"model_filename", info.model_path}, {"model_type", model.config.arch},
                        {"model_size", model.weight_bytes()}, {"model_n_params", model.n_params()},
                        {"n_threads", r.threads}, {"n_parallel", r.spec.n_parallel}, {"n_prompt", r.spec.n_prompt}, {"n_gen", r.spec.n_gen},
                        {"n_depth", r.spec.depth}, {"repetitions", info.plan->repetitions}, {"warmup", r.spec.warmup},
                        {"avg_ts", r.result.mean()}, {"stddev_ts", r.result.stddev()}, {"median_ts", r.result.median()},
                        {"samples_ts", r.result.samples_ts}, {"attn", r.policy.attn},
                        {"budget", pol.dense ? nlohmann::json(nullptr) : budget_json(shared.budget)},
                        {"fcs", r.fcs}, {"fc_sharing", name_of(shared.fc_sharing)}, {"fc_alloc", name_of(shared.fc_alloc)},
                        {"fc_rank", name_of(shared.fc_rank)},
                        {"fill", r.spec.depth > 0 ? (r.spec.random_fill ? "random" : "prefill") : ""},
                        {"synthetic_profile", pol.has_k_dom && r.policy.synthetic_profile}, {"type_k", name_of(shared.cache.types.k)},
                        {"type_v", name_of(shared.cache.types.v)}, {"tip_int8", pol.has_k_dom && shared.cache.types.tip_int8}, {"kv_bytes_read_per_token", kv_counted(r) ? nlohmann::json(r.result.kv_bytes_per_token) : nlohmann::json(nullptr)},
                        {"achieved_gbps", row_gbps(r, info)}, {"kv_offload", offload_str(r.policy.cache.offload)},
                        {"kv_prefetch", r.policy.cache.offload.offloaded() && r.policy.cache.offload.prefetch},
                        {"peak_rss_mib", r.result.peak_rss / 1048576.0}};
    if (!info.plan->attention_only) j.update(kv_memory_json(r.result.memory));
    if (lines) out += j.dump() + "\n";  // one object per line
    else all.push_back(std::move(j));
  }
  return lines ? out : all.dump(2) + "\n";
}

// llama-bench's CSV columns, in its order (those that mean something here; tools read them by name),
// then fasa's own. Text cells are quoted as llama-bench quotes them, numbers are bare.
std::string render_csv(const std::vector<BenchRow>& rows, const BenchRunInfo& info) {
  const Model& model = *info.model;
  const std::string cpu = cpu_name(), when = utc_now();
  const int ubatch = SessionOptions{}.n_ubatch;  // prefill's chunk: llama.cpp's n_batch and n_ubatch both
  std::string out =
      "build_commit,build_number,cpu_info,gpu_info,backends,model_filename,model_type,model_size,model_n_params,"
      "n_batch,n_ubatch,n_threads,type_k,type_v,n_gpu_layers,flash_attn,n_prompt,n_gen,n_depth,test_time,avg_ns,"
      "stddev_ns,avg_ts,stddev_ts,"
      "test,attn,budget,fcs,n_parallel,median_ts,kv_mib_per_token,gbps,peak_rss_mib,notes\n";
  for (const BenchRow& r : rows) {
    // Nanoseconds per repetition, from its tokens (every sequence's) per second, as llama-bench's avg_ns.
    BenchResult ns;
    const double tokens = (double)(r.spec.n_prompt + r.spec.n_gen) * r.spec.n_parallel;
    for (double ts : r.result.samples_ts) ns.samples_ts.push_back(ts > 0 ? tokens / ts * 1e9 : 0.0);
    const double gbps = row_gbps(r, info);
    const PolicyOptions& p = *info.policy;
    const DeviceModel* gpu = r.spec.device;
    out += fmt("\"%s\",0,\"%s\",%s,\"%s\",\"%s\",\"%s\",%zu,%lld,%d,%d,%d,\"%s\",\"%s\",%d,0,%d,%d,%lld,\"%s\",%.0f,%.0f,%.6f,%.6f,",
               FASA_VERSION, cpu.c_str(), gpu ? csv_cell(gpu->describe()).c_str() : "\"\"", gpu ? "Vulkan" : "CPU",
               info.model_path.c_str(), model.config.arch.c_str(), model.weight_bytes(),
               (long long)model.n_params(), ubatch, ubatch, r.threads, name_of(p.cache.types.k),
               name_of(p.cache.types.v), gpu ? model.config.n_layer : 0, r.spec.n_prompt, r.spec.n_gen, (long long)r.spec.depth, when.c_str(),
               ns.mean(), ns.stddev(), r.result.mean(), r.result.stddev());
    out += fmt("%s,%s,%s,%d,%d,%.6f,%s,%s,%.1f,%s\n", csv_cell(r.test).c_str(), r.policy.attn.c_str(),
               policy_info(r.policy.attn).dense ? "" : csv_cell(p.budget.str()).c_str(), r.fcs, r.spec.n_parallel,
               r.result.median(), kv_counted(r) ? fmt("%.4f", r.result.kv_bytes_per_token / 1048576.0).c_str() : "",
               gbps > 0 ? fmt("%.2f", gbps).c_str() : "", r.result.peak_rss / 1048576.0,
               csv_cell(row_notes(r, rows, info)).c_str());
  }
  return out;
}

}  // namespace

std::string render_bench_rows(const std::vector<BenchRow>& rows, const BenchRunInfo& info, const std::string& format) {
  if (format == "json" || format == "jsonl") return render_json(rows, info, format == "jsonl");
  const std::string name = std::filesystem::path(info.model_path).filename().string();
  const double size_gib = info.model->weight_bytes() / 1073741824.0, params_b = info.model->n_params() / 1e9;
  std::string out;
  if (format == "csv") return render_csv(rows, info);
  if (format != "md") throw Error("-o must be md, csv, json or jsonl");
  out = "| model | size | params | attn | threads | test | t/s | KV MiB/token | GB/s | notes |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& r : rows) {
    const double gbps = row_gbps(r, info);
    out += fmt("| %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f | %s | %s | %s |\n",
                  name.c_str(), size_gib, params_b, bench_label(r.policy, r.fcs).c_str(), r.threads, r.test.c_str(),
                  r.result.mean(), r.result.stddev(),
                  kv_counted(r) ? fmt("%.2f", r.result.kv_bytes_per_token / 1048576.0).c_str() : "",
                  gbps > 0 ? fmt("%.1f", gbps).c_str() : "", row_notes(r, rows, info).c_str());
  }
  return out;
}

}  // namespace fasa
