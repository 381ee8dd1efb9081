#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "fasa/kv_memory.h"
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

// llama.cpp's GPU options (-ngl N, -fa on|off|auto), accepted so its command lines work here and
// ignored with one note: this engine runs on the CPU.
void add_gpu_options(CLI::App* cmd);

// The policy options every command that decodes takes (--attn, --profile, --budget, ...).
// with_kv_offload: also --kv-offload, --kv-fast-limit, --kv-prefetch (bench takes lists of its own).
void add_policy_options(CLI::App* cmd, PolicyOptions& o, bool with_attn_and_budget = true, bool with_kv_offload = true);
// FASA-M's memory accounting as JSON fields (kv_fast_bytes, kv_slow_bytes, kv_full_bytes, rss_bytes, ...)
// and as one line for people.
nlohmann::json kv_memory_json(const KvMemory& m);
std::string kv_memory_line(const KvMemory& m);

// Whole file as a string; throws fasa::Error naming the file.
std::string read_text_file(const std::string& path);

// Throws fasa::Error naming the file when it cannot be written (missing folder, no permission), so a
// long job fails before its work rather than after it.
void check_writable(const std::string& path);

}  // namespace fasa::cli
