// fasa — the command-line front end. Each subcommand lives in its own file.
#include <cstdio>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"fasa: long-context decoding with Frequency-Aware Sparse Attention"};
  app.require_subcommand(1);
  auto run = fasa::cli::add_run_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("run")) return run();
  } catch (const fasa::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  }
  return 0;
}
