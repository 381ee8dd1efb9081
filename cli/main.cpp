// fasa — the command-line front end. Each subcommand lives in its own file.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/commands.h"
#include "fasa/error.h"

namespace {
// Options whose value is free text, which may itself look like a flag.
bool takes_text(const char* option) {
  for (const char* o : {"-p", "--prompt", "-f", "--file", "-sys", "--system-prompt"})
    if (std::strcmp(option, o) == 0) return true;
  return false;
}

// Threads that wait at the end of a parallel loop spin for a short while, then sleep: on a machine
// where another process is busy, a waiting thread that spins takes the core its descheduled
// partner needs (libgomp spins 300000 rounds by default; 2 threads then decoded at 0.64x one thread,
// with 1000 at 0.93x and no loss on an idle machine: docs/PERFORMANCE.md). libgomp reads the setting
// when it loads, before main, so the process runs itself once more with it set, unless the user set
// either variable.
void wait_briefly_then_sleep(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", "1000", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: go on with the default
}
}  // namespace

int main(int argc, char** argv) {
  wait_briefly_then_sleep(argv);
  CLI::App app{"fasa: long-context decoding with Frequency-Aware Sparse Attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fasa " FASA_VERSION);
  const fasa::cli::Command commands[] = {
      fasa::cli::add_run_command(app),
      fasa::cli::add_calibrate_command(app),
      fasa::cli::add_analyze_command(app),
      fasa::cli::add_eval_command(app),
      fasa::cli::add_info_command(app),
      fasa::cli::add_tokenize_command(app),
      fasa::cli::add_make_model_command(app),
      fasa::cli::add_bench_command(app),
      fasa::cli::add_serve_command(app),
      fasa::cli::add_chat_command(app),
  };
  if (argc == 1 || std::strcmp(argv[1], "help") == 0) {  // as `fasa --help`, like llama.cpp's tools
    app.name(argv[0]);
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  // llama.cpp's multi-letter single-dash flags, read as the long options they are here (CLI11 reads
  // "-cnv" as "-c nv"). Those that take a value only where one follows, so a prompt "-fa" (as in
  // -p -fa) stays text; never right after an option whose value is free text.
  const struct { const char *llama, *ours; bool takes_value; } aliases[] = {
      {"-pg", "--pg", true}, {"-npl", "--n-parallel", true}, {"-ngl", "--n-gpu-layers", true},
      {"-fa", "--flash-attn", true}, {"-np", "--parallel", true}, {"-ub", "--ubatch-size", true},
      {"-ctk", "--cache-type-k", true}, {"-ctv", "--cache-type-v", true}, {"-sys", "--system-prompt", true},
      {"-cnv", "--conversation", false}, {"-no-cnv", "--no-conversation", false}, {"-st", "--single-turn", false},
      {"-co", "--color", false}};
  std::vector<char*> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (takes_text(args[i - 1])) continue;
    for (const auto& alias : aliases) {
      if (std::strcmp(args[i], alias.llama) != 0) continue;
      const bool value_follows = i + 1 < args.size() && args[i + 1][0] != '-';
      if (!alias.takes_value || value_follows) args[i] = const_cast<char*>(alias.ours);
      else if (std::strcmp(alias.llama, "-fa") == 0) args[i] = const_cast<char*>("--flash-attn=on");  // -fa alone: on
    }
  }
  try {
    app.parse((int)args.size(), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fasa::Error& e) {  // a setting's value (set_policy_option)
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const fasa::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  return 0;
}
