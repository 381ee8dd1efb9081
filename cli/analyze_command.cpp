// `fasa analyze PROFILE`: CA heatmaps, the high/low-CA chunk shares and dominant chunks per head.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "draw/profile_report.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {

struct AnalyzeOptions {
  std::string profile;
  std::string out_dir;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) fail(path, "cannot write");
}

int analyze_main(const AnalyzeOptions& o) {
  namespace fs = std::filesystem;
  const Profile p = load_profile(o.profile);
  const std::string dir = !o.out_dir.empty() ? o.out_dir : fs::path(o.profile).replace_extension("").string() + "-analysis";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create directory: " + ec.message());
  const std::string md = profile_report_markdown(p, o.profile);
  write_text(dir + "/report.md", md);
  write_text(dir + "/report.json", profile_report_json(p).dump(1) + "\n");
  const auto pngs = write_profile_heatmaps(p, dir);
  std::fputs(md.c_str(), stdout);
  std::fprintf(stderr, "wrote %s/report.md, %s/report.json and %zu heatmaps (%s/ca_layer_*.png)\n", dir.c_str(),
               dir.c_str(), pngs.size(), dir.c_str());
  return 0;
}

}  // namespace

Command add_analyze_command(CLI::App& app) {
  auto o = std::make_shared<AnalyzeOptions>();
  CLI::App* cmd = app.add_subcommand("analyze", "Report a profile: CA heatmaps, chunk shares, dominant chunks");
  cmd->add_option("profile", o->profile, "Profile from `fasa calibrate`")->required();
  cmd->add_option("-o,--output", o->out_dir, "Output directory (default: PROFILE-analysis/)");
  return {cmd, [o] { return analyze_main(*o); }};
}

}  // namespace fasa::cli
