// Options and helpers shared by the subcommands.
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "fasa/error.h"

namespace fasa::cli {

void add_policy_options(CLI::App* cmd, PolicyOptions& o, bool with_attn_and_budget) {
  if (with_attn_and_budget) {
    std::string names;
    for (auto& n : selector_names()) names += (names.empty() ? "" : ", ") + n;
    cmd->add_option("--attn", o.attn, "Decode attention policy: " + names)->capture_default_str();
    cmd->add_option("--budget", o.budget, "Tokens each head attends to: a count, or a fraction of the context")
        ->capture_default_str();
  }
  cmd->add_option("--profile", o.profile, "FASA profile (from `fasa calibrate`)");
  cmd->add_flag("--synthetic-profile", o.synthetic_profile,
                "FASA without a profile: seeded random chunks (speed and soak runs only; quality is meaningless)");
  cmd->add_option("--fcs", o.fcs, "FASA: frequency chunks scored per head (default: the profile's)")
      ->check(CLI::Range(1, 512));
  cmd->add_option("--fc-sharing", o.fc_sharing, "FASA: chunks chosen per query 'head' or per KV 'group'")
      ->capture_default_str();
  cmd->add_option("--dense-layers", o.dense_layers, "Layers kept dense, comma-separated; \"\" for none")
      ->capture_default_str();
  cmd->add_option("--sink", o.sink, "FASA: first tokens always attended, inside the budget (stream: its sink count, default 8)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--recent", o.recent, "FASA: most recent tokens always attended, inside the budget")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--seed-policy", o.seed, "Seed of the random policy")->capture_default_str();
  cmd->add_option("--sparq-r", o.sparq_r, "SparQ: query dims used for approximate scores (default head_dim/4)");
  cmd->add_option("--snapkv-window", o.snapkv_window, "SnapKV: observation window")->capture_default_str();
  cmd->add_option("--snapkv-every", o.snapkv_every, "SnapKV: re-select every N decode steps (0: never)")
      ->capture_default_str();
  cmd->add_option("--kv-type", o.kv_type, "KV cache element type: f16 (half the bytes read per step) or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace fasa::cli
