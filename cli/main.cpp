// fasa — the command-line front end. Each subcommand lives in its own file.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "fasa/error.h"

namespace {
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
  app.formatter(fasa::cli::help_with_llama_names());  // before the subcommands, which take it over
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
  try {
    std::vector<char*> args = fasa::cli::with_long_flag_names(argc, argv);
    app.parse((int)args.size(), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fasa::Error& e) {  // a setting's value (set_policy_option), a flag without its value
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
