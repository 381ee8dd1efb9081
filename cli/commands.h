#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

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

// The policy options every command that decodes takes (--attn, --profile, --budget, ...).
void add_policy_options(CLI::App* cmd, PolicyOptions& o, bool with_attn_and_budget = true);

// Whole file as a string; throws fasa::Error naming the file.
std::string read_text_file(const std::string& path);

}  // namespace fasa::cli
