#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace fasa::cli {

// Each subcommand adds itself to the app and returns the action to run when it was chosen.
std::function<int()> add_run_command(CLI::App& app);

}  // namespace fasa::cli
