#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "eval/policy_runs.h"
#include "fasa/fasa.h"
#include "sparse/policy.h"

namespace fasa::cli {

// A subcommand: its CLI11 parser and the action to run when it was chosen.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);
Command add_analyze_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_make_model_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_chat_command(CLI::App& app);

// The options several commands take, each declared here once, named as llama.cpp's tools name them.
// Where a command gives its own help, the meaning differs there (a window length, not a context).
inline constexpr const char* kModelHelp = "Model: a .gguf file or a Hugging Face directory";
CLI::Option* add_model_option(CLI::App* cmd, std::string& path, const std::string& help = kModelHelp);  // -m
CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& help = "Threads (default: all cores)");
CLI::Option* add_threads_option(CLI::App* cmd, std::vector<int>& threads);  // a comma list (bench)
CLI::Option* add_ctx_option(CLI::App* cmd, int64_t& n_ctx, const std::string& help, int64_t min = 1);  // -c
CLI::Option* add_file_option(CLI::App* cmd, std::string& path, const std::string& help);  // -f
CLI::Option* add_n_predict_option(CLI::App* cmd, int& n, const std::string& help, int min);  // -n

// With a temperature and no seed given, a fresh one, printed to stderr so the run can be repeated (as
// llama.cpp does).
void pick_seed(SamplerOptions& o, bool seed_given);

// --temp, --top-k, --top-p, -s/--seed (a seed < 0, or none, leaves seed_given false: a random one).
void add_sampling_options(CLI::App* cmd, SamplerOptions& o, bool& seed_given);

// -ngl/--n-gpu-layers and --device (llama.cpp's): the Vulkan device and how many layers go there.
void add_gpu_options(CLI::App* cmd, EngineOptions& engine);
// --no-mmap, --mmap 0|1 (-mmp), --mlock: how the weights are held (EngineOptions::mmap, mlock).
void add_mapping_options(CLI::App* cmd, EngineOptions& engine);

// What the commands that generate take (run, chat): -t, -ngl/--device (the GPU), the policy options,
// the mapping flags (--no-mmap, --mlock), llama.cpp's flags that mean nothing here (-fa, -b, -np, ...;
// cli/llama_flags.h) and the sampling options.
void add_generation_options(CLI::App* cmd, int& threads, EngineOptions& engine, PolicyOptions& policy,
                            SamplerOptions& sampling, bool& seed_given);

// A conversation's own options, as llama-cli names them: -sys/--system-prompt, -st/--single-turn, and
// -co/--color (accepted, with a note: no colours here).
void add_conversation_options(CLI::App* cmd, std::string& system_prompt, bool& single_turn);

// The policy options every command that decodes takes (--profile, --fcs, --kv-type, --kv-fast-limit, ...),
// plus the parts a command takes as single values: bench and eval take --attn (and bench --kv-offload,
// --kv-prefetch) as lists of their own.
enum PolicyParts : unsigned { kAttn = 1, kBudget = 2, kOffload = 4, kAllPolicyParts = 7 };
// With `lists` (the evaluations), a list-capable setting given several values (--fcs 4,8,16) goes
// there (is_list_setting in src/eval/policy_runs.h), a variant each.
void add_policy_options(CLI::App* cmd, PolicyOptions& o, unsigned parts = kAllPolicyParts, SettingLists* lists = nullptr);

// Whole file as a string; throws fasa::Error naming the file.
std::string read_text_file(const std::string& path);
// The same, where "-" is standard input (llama.cpp's -f -: run and tokenize).
std::string read_text_or_stdin(const std::string& path);

// Throws fasa::Error naming the file when it cannot be written (missing folder, no permission), so a
// long job fails before its work rather than after it.
void check_writable(const std::string& path);

}  // namespace fasa::cli
