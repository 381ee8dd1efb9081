// llama.cpp's command-line habits: its multi-letter single-dash flags (-ngl, -cnv, ...), read as the
// long options they are here and shown beside them in --help; and its options that mean nothing here,
// accepted so its command lines work, each ignored with a note.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <vector>

namespace fasa::cli {

// argv with llama.cpp's multi-letter flags replaced by their long names (CLI11 reads "-cnv" as
// "-c nv"); never the value of an option whose value is free text (-p -fa stays a prompt). Throws
// fasa::Error for one that needs a value and has none (-ngl -p hi).
std::vector<char*> with_long_flag_names(int argc, char** argv);

// --help that writes each such option's llama.cpp name before its own: "-ngl,--n-gpu-layers".
std::shared_ptr<CLI::FormatterBase> help_with_llama_names();

// Groups of llama.cpp options a command accepts and ignores.
enum IgnoredFlags : unsigned {
  kGpuFlags = 1,       // -ngl N (where the command declares none: it runs on the CPU), -fa on|off|auto
  kBatchFlags = 4,     // -b N, -ub N: a prompt goes through in fasa's own chunks
  kParallelFlag = 8,   // -np N: one sequence (`fasa serve --parallel` serves several)
  kServerFlags = 16,   // --jinja, --metrics: the chat format, /metrics are always on
};
void add_ignored_llama_options(CLI::App* cmd, unsigned groups);

}  // namespace fasa::cli
