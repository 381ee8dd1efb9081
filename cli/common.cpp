// Options and helpers shared by the subcommands.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <sstream>

#include "calib/auto_profile.h"
#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {
// llama.cpp's --device names: "Vulkan0", "Vulkan1", ... (or the index alone).
int vulkan_device_index(const std::string& name) {
  const std::string digits = name.rfind("Vulkan", 0) == 0 ? name.substr(6) : name;
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw Error("--device " + name + ": expected Vulkan0, Vulkan1, ... (vulkaninfo --summary lists them)");
  return std::stoi(digits);
}
}  // namespace

CLI::Option* add_model_option(CLI::App* cmd, std::string& path, const std::string& help) {
  return cmd->add_option("-m,--model", path, help)->capture_default_str();
}

CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
  return cmd->add_option("-t,--threads", threads, help)->check(CLI::Range(1, 1024));
}

CLI::Option* add_threads_option(CLI::App* cmd, std::vector<int>& threads) {
  return cmd->add_option("-t,--threads", threads, "Threads, comma-separated (default: all cores)")
      ->delimiter(',')->check(CLI::Range(1, 1024));
}

CLI::Option* add_ctx_option(CLI::App* cmd, int64_t& n_ctx, const std::string& help, int64_t min) {
  return cmd->add_option("-c,--ctx-size", n_ctx, help)->check(CLI::Range(min, (int64_t)1 << 24));
}

CLI::Option* add_file_option(CLI::App* cmd, std::string& path, const std::string& help) {
  return cmd->add_option("-f,--file", path, help);
}

CLI::Option* add_n_predict_option(CLI::App* cmd, int& n, const std::string& help, int min) {
  return cmd->add_option("-n,--n-predict", n, help)->capture_default_str()->check(CLI::Range(min, 1 << 24));
}

namespace {

// A flag whose value goes through the settings' one parser (set_policy_option), as the server's JSON
// fields and Python's keywords do: a mistake gets the same message everywhere.
// Where a setting flag's value goes: the options, or (an evaluation's list-capable setting given
// several values) the lists.
struct SettingTarget {
  PolicyOptions* o;
  SettingLists* lists;
};

CLI::Option* add_setting(CLI::App* cmd, const std::string& flags, SettingTarget t, const char* setting,
                         const std::string& help, const std::string& shown_default = "") {
  CLI::Option* opt = cmd->add_option_function<std::string>(
      flags,
      [t, setting](const std::string& v) {
        if (!t.lists || !is_list_setting(setting) || v.find(',') == std::string::npos) return set_policy_option(*t.o, setting, v);
        std::vector<std::string> values;
        for (size_t at = 0;;) {
          const size_t comma = v.find(',', at);
          values.push_back(v.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
          set_policy_option(*t.o, setting, values.back());  // a bad value fails here, before any work
          if (comma == std::string::npos) break;
          at = comma + 1;
        }
        t.lists->emplace_back(setting, std::move(values));
      },
      help);
  if (!shown_default.empty()) opt->default_str(shown_default);
  return opt;
}

CLI::Option* add_setting_flag(CLI::App* cmd, const std::string& flag, PolicyOptions& o, const char* setting,
                              const std::string& help) {
  return cmd->add_flag_callback(flag, [&o, setting] { set_policy_option(o, setting, "true"); }, help);
}

}  // namespace

void add_policy_options(CLI::App* cmd, PolicyOptions& o, unsigned parts, SettingLists* lists) {
  const SettingTarget t{&o, lists};
  if (parts & kAttn) {
    std::string names;
    for (const PolicyInfo& p : policy_registry()) names += std::string("\n  ") + p.name + ": " + p.description;
    add_setting(cmd, "--attn", t, "attn", "Decode attention policy:" + names, o.attn);
  }
  if (parts & kBudget)
    add_setting(cmd, "--budget", t, "budget",
                "Tokens each head attends to: a count (256), or a share of the context written as one (0.5, 50%, 1.0)",
                o.budget.str());
  add_setting(cmd, "--profile", t, "profile",
              "FASA profile (from `fasa calibrate`), or 'auto' (what run, serve and eval use without one): the first "
              "prompt of at least " + std::to_string(PromptProfiler::kMinTokens) + " tokens measures one during its "
              "prefill, cached per model in $XDG_CACHE_HOME/fasa/profiles");
  add_setting_flag(cmd, "--synthetic-profile", o, "synthetic_profile",
                   "FASA without a profile: seeded random chunks (speed and soak runs only; quality is meaningless)");
  add_setting(cmd, "--fcs", t, "fcs",
              "FASA: frequency chunks scored per head, 1-512 (default: the profile's; a synthetic profile's is calibration's default)");
  add_setting(cmd, "--fc-alloc", t, "fc_alloc",
              "FASA: 'uniform' (every head scores --fcs chunks) or 'adaptive' (--fcs on average: heads whose "
              "score (--fc-rank) concentrates in few chunks get fewer, flat ones more; same TIP bytes with group sharing)",
              name_of(o.fc_alloc));
  add_setting(cmd, "--fc-rank", t, "fc_rank",
              "FASA: 'auto' takes the ranking and chunk count the profile chose per layer by how well each finds "
              "full attention's far keys (`fasa analyze` shows them); 'agreement' ranks each head's chunks by "
              "agreement with full attention on the calibration text (the paper's), 'magnitude' by the profile's "
              "mean |q| times mean |k| on their two dims; both with the profile's --fcs",
              name_of(o.fc_rank));
  add_setting(cmd, "--fc-sharing", t, "fc_sharing", "FASA: chunks chosen per query 'head' or per KV 'group'",
              name_of(o.fc_sharing));
  add_setting(cmd, "--dense-layers", t, "dense_layers", "Layers kept dense, comma-separated; \"\" for none",
              layer_list_str(o.dense_layers));
  add_setting(cmd, "--sink", t, "sink", "FASA: first tokens always attended, inside the budget (default 1; with --recent at most half the budget; stream: its sink count, default 8)");
  add_setting(cmd, "--recent", t, "recent", "FASA: most recent tokens always attended, inside the budget (default 15; --sink 0 --recent 0: the paper's FASA)");
  add_setting(cmd, "--tip-mass", t, "tip_mass",
              "FASA: adaptive budget (Twilight's top-p): of the budget's top rows keep the fewest whose softmax "
              "weights on TIP's scores sum to this share, e.g. 0.95 (default 0: the whole budget)");
  add_setting(cmd, "--seed-policy", t, "seed_policy", "Seed of the random policy", std::to_string(o.seed));
  add_setting(cmd, "--sparq-r", t, "sparq_r", "SparQ: query dims used for approximate scores (default head_dim/4)");
  add_setting(cmd, "--ds-channels", t, "ds_channels",
              "DoubleSparse: heavy channels per KV head (default: the dims of FASA's default chunks, 2 * max(1, rotary dims / 8))");
  add_setting(cmd, "--snapkv-window", t, "snapkv_window", "SnapKV: observation window", std::to_string(o.snapkv_window));
  add_setting(cmd, "--snapkv-every", t, "snapkv_every", "SnapKV: re-select every N decode steps (0: never)",
              std::to_string(o.snapkv_every));
  add_setting(cmd, "--kv-type", t, "kv_type",
              "KV cache element type of K and V: f16 (as llama.cpp's default), q8_0 (int8 blocks of 32: about "
              "half of f16's bytes per step) or f32 (exact)",
              name_of(o.cache.types.k));
  add_setting(cmd, "--cache-type-k", t, "cache_type_k", "The keys' type, as llama.cpp's -ctk (default: --kv-type)");
  add_setting(cmd, "--cache-type-v", t, "cache_type_v", "The values' type, as llama.cpp's -ctv (default: --kv-type)");
  add_setting_flag(cmd, "--tip-int8", o, "tip_int8",
                   "FASA: rank tokens on a q8_0 copy of the K_dom plane (attention still reads the keys at --kv-type): "
                   "fewer bytes per decode step for a little more memory");
  add_setting(cmd, "--kv-fast-limit", t, "kv_fast_limit", "Fast memory the KV cache may use (bytes, or e.g. 512M, 2G)");
  if (!(parts & kOffload)) return;
  add_setting(cmd, "--kv-offload", t, "kv_offload",
              "FASA-M: keep K_rest and V of FASA's heads in 'ram' or in a file under 'file:DIR'; only the K_dom "
              "plane stays in fast memory and each step fetches the selected rows");
  add_setting(cmd, "--kv-prefetch", t, "kv_prefetch",
              "FASA-M: fetch the next layer's likely rows in a background thread: on or off (default off: it "
              "pays only with a core of its own and steps that repeat their selections)");
}

void pick_seed(SamplerOptions& o, bool seed_given) {
  if (o.temperature <= 0 || seed_given) return;
  o.seed = std::random_device{}();
  std::fprintf(stderr, "sampling seed: %llu\n", (unsigned long long)o.seed);
}

void add_sampling_options(CLI::App* cmd, SamplerOptions& o, bool& seed_given) {
  cmd->add_option("--temp", o.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Top-k sampling; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Top-p (nucleus) sampling; 1 = off")->capture_default_str();
  cmd->add_option_function<int64_t>(
      "-s,--seed", [&o, &seed_given](int64_t s) { o.seed = (uint64_t)s, seed_given = s >= 0; },
      "Sampling seed (default or -1: a random one, printed to stderr)");
}

void add_gpu_options(CLI::App* cmd, EngineOptions& engine) {
  std::string device_policies;  // the registry's rows that select on the device
  for (const PolicyInfo& p : policy_registry())
    if (p.gpu) device_policies += (device_policies.empty() ? "" : ", ") + p.name;
  cmd->add_option("--n-gpu-layers", engine.gpu_layers,  // (-ngl: cli/llama_flags.cpp)
                  "Layers on the GPU (Vulkan): 0 none (default), -1 or the layer count (e.g. 99) all; --attn " + device_policies)
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option_function<std::string>(
      "--device", [&engine](const std::string& d) { engine.device = vulkan_device_index(d); },
      "The Vulkan device for -ngl: Vulkan0 (default), Vulkan1, ... (vulkaninfo's order)");
}

void add_mapping_options(CLI::App* cmd, EngineOptions& engine) {
  cmd->add_flag_callback("--no-mmap", [&engine] { engine.mmap = false; },
                         "Read the model's files into memory instead of mapping them (llama.cpp's)");
  cmd->add_option("--mmap", engine.mmap, "1: map the model's files (default), 0: read them (llama-bench's -mmp 0|1)");
  cmd->add_flag("--mlock", engine.mlock, "Lock the weights decoding reads in RAM (llama.cpp's; may need `ulimit -l`)");
}

void add_generation_options(CLI::App* cmd, int& threads, EngineOptions& engine, PolicyOptions& policy,
                            SamplerOptions& sampling, bool& seed_given) {
  add_threads_option(cmd, threads);
  add_gpu_options(cmd, engine);
  add_mapping_options(cmd, engine);
  add_policy_options(cmd, policy);
  add_ignored_llama_options(cmd, kGpuFlags | kBatchFlags | kParallelFlag);
  add_sampling_options(cmd, sampling, seed_given);
}

void add_conversation_options(CLI::App* cmd, std::string& system_prompt, bool& single_turn) {
  cmd->add_option("--system-prompt", system_prompt, "The conversation's system message (llama-cli's -sys)");
  cmd->add_flag("--single-turn", single_turn, "Answer one turn, then exit (llama-cli's -st)");
  cmd->add_flag_callback(
      "--color", [] { std::fprintf(stderr, "note: -co / --color is ignored: fasa prints no colours\n"); },
      "Ignored (llama-cli's -co): no colours");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_text_or_stdin(const std::string& path) {
  if (path != "-") return read_text_file(path);
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

void check_writable(const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file to write");
  {
    std::ofstream out(path, std::ios::app);  // opens without truncating an existing file
    if (!out) fail(path, std::string("cannot write here (") + std::strerror(errno) + ")");
  }
  if (!existed) std::filesystem::remove(path, ec);
}

}  // namespace fasa::cli
