// `fasa eval ca`: compound contextual agreement of FASA's token selection with the exact top-K
// (paper Table 1 layout), on a text, for several chunk counts, sharing modes and K.
#include <omp.h>

#include <cstdio>
#include <set>
#include <sstream>

#include "calib/agreement.h"
#include "calib/calibrate.h"
#include "cli/commands.h"
#include "util/error.h"

namespace fasa::cli {

namespace {

struct EvalCaOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string text_file;
  std::string profile;
  std::vector<int> fcs = {4, 8, 16};
  std::vector<int> top_k = {16, 64, 256};
  std::vector<std::string> sharing = {"head", "group"};
  int64_t min_pos = 300;
  int64_t n_ctx = 0;
  int threads = 0;
};

int eval_ca_main(const EvalCaOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  auto model = load_model(o.model);
  const Profile p = load_profile(o.profile);
  check_profile_matches(p, *model, o.profile);
  const ModelConfig& c = model->config;
  std::vector<std::string> names;
  std::vector<double> dom_share;  // per set: mean share of K dims in the K_dom plane TIP reads
  std::vector<std::vector<std::vector<int>>> sets;
  const int group = c.n_head / c.n_head_kv;
  for (const std::string& mode : o.sharing)
    for (int n : o.fcs) {
      if (n > p.n_fc) throw Error("--fcs " + std::to_string(n) + " exceeds the " + std::to_string(p.n_fc) + " chunks");
      const FcSharing sh = parse_fc_sharing(mode);
      std::vector<std::vector<int>> per_head;
      double share = 0;
      for (int l = 0; l < c.n_layer; ++l)
        for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
          std::set<int> plane;  // chunks in this KV head's K_dom: the union over its query heads
          for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
            per_head.push_back(p.dominant_fcs(l, h, n, sh));
            plane.insert(per_head.back().begin(), per_head.back().end());
          }
          share += (double)plane.size() / p.n_fc / (c.n_layer * c.n_head_kv);
        }
      dom_share.push_back(share);
      sets.push_back(std::move(per_head));
      names.push_back("FASA F=" + std::to_string(n) + " (" + mode + ")");
    }
  AgreementMeter meter = AgreementMeter::compound(c, sets, o.top_k, o.min_pos);
  int64_t n_tokens = 0;
  run_dense_windows(*model, read_text_file(o.text_file), o.n_ctx, meter, "measuring CA", &n_tokens);

  std::ostringstream md;
  md << "Compound CA (%) with the exact top-K, " << o.text_file << " (" << n_tokens << " tokens), queries from position "
     << o.min_pos << ", all layers and query heads. K_dom: share of key dims TIP reads (per KV head).\n\n"
     << "| rule \\ K | K_dom (%) |";
  for (int k : o.top_k) md << " " << k << " |";
  md << "\n|---|---|";
  for (size_t i = 0; i < o.top_k.size(); ++i) md << "---|";
  md << "\n";
  for (size_t s = 0; s < sets.size(); ++s) {
    char share[32];
    std::snprintf(share, sizeof share, " %.1f |", 100 * dom_share[s]);
    md << "| " << names[s] << " |" << share;
    for (size_t k = 0; k < o.top_k.size(); ++k) {
      char b[32];
      std::snprintf(b, sizeof b, " %.1f |", 100 * meter.compound_ca(s, k));
      md << b;
    }
    md << "\n";
  }
  md << "| queries (x heads x layers) | |";
  for (size_t k = 0; k < o.top_k.size(); ++k) md << " " << meter.compound_queries(k) << " |";
  md << "\n";
  std::fputs(md.str().c_str(), stdout);
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalCaOptions>();
  CLI::App* eval = app.add_subcommand("eval", "Quality measurements");
  eval->require_subcommand(1);
  CLI::App* ca = eval->add_subcommand("ca", "Compound CA of FASA's selection with the exact top-K (Table 1 layout)");
  ca->add_option("-m,--model", o->model, "Model")->capture_default_str();
  ca->add_option("-f,--file", o->text_file, "Text to measure on")->required();
  ca->add_option("--profile", o->profile, "FASA profile")->required();
  ca->add_option("--fcs", o->fcs, "Chunk counts per head")->delimiter(',')->capture_default_str();
  ca->add_option("--topk", o->top_k, "Values of K")->delimiter(',')->capture_default_str();
  ca->add_option("--fc-sharing", o->sharing, "Sharing modes: head, group")->delimiter(',')->capture_default_str();
  ca->add_option("--min-pos", o->min_pos, "Skip queries before this position")->capture_default_str();
  ca->add_option("-c,--ctx-size", o->n_ctx, "Window length (default: the model's training context)");
  ca->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(CLI::Range(1, 1024));
  return {ca, [o] { return eval_ca_main(*o); }};
}

}  // namespace fasa::cli
