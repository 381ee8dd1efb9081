// `fasa calibrate`: measure every head's per-chunk contextual agreement on a text, write a profile.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "calib/calibrate.h"
#include "calib/chunk_choice.h"
#include "cli/commands.h"

namespace fasa::cli {

namespace {

struct CalibrateOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string text_file;
  std::string output;
  int threads = 0;
  CalibrationOptions calib;
};

int calibrate_main(const CalibrateOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  check_writable(o.output);
  auto model = load_model(o.model);
  const std::string text = read_text_file(o.text_file);
  const auto t0 = std::chrono::steady_clock::now();
  const Profile p = calibrate(*model, text, std::filesystem::path(o.text_file).filename().string(), o.calib);
  save_profile(p, o.output);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "calibrated %s on %lld tokens of %s: %lld queries per head, K=%d, N_tip=%d of %d chunks, %.1f s\n",
               o.model.c_str(), (long long)p.calibration_tokens, o.text_file.c_str(), (long long)p.queries, p.top_k,
               p.n_tip, p.n_fc, s);
  if (p.choice)
    std::fprintf(stderr, "chunk choice (share of full attention's top key older than %lld tokens within the top %d on the chunks alone, weighted by attention on distant keys; among look-alikes: the share ranked above the same place in every other record):\n%s",
                 (long long)p.choice->settings.window, p.choice->settings.pick, describe_choice(*p.choice).c_str());
  if (const std::string w = choice_warning(p); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  std::fprintf(stderr, "profile written to %s\n", o.output.c_str());
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Find each head's dominant frequency chunks; write a profile");
  add_model_option(cmd, o->model);
  add_file_option(cmd, o->text_file, "Calibration text")->required();
  cmd->add_option("-o,--output", o->output, "Profile to write (JSON)")->required();
  cmd->add_option("--fcs", o->calib.n_tip, "Chunks kept per head (default: a quarter of them)")->check(CLI::Range(1, 512));
  cmd->add_option("--topk", o->calib.top_k, "K of the contextual agreement CA_K")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--min-pos", o->calib.min_pos, "Skip queries before this position")->capture_default_str()->check(CLI::Range((int64_t)0, (int64_t)1 << 30));
  add_ctx_option(cmd, o->calib.n_ctx, "Window length (default: the model's training context)", 2);
  add_threads_option(cmd, o->threads);
  return {cmd, [o] { return calibrate_main(*o); }};
}

}  // namespace fasa::cli
