#include "draw/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "draw/heatmap.h"

namespace fasa {

std::vector<LayerCaShares> ca_shares(const Profile& p) {
  std::vector<LayerCaShares> out;
  const int H = p.model.n_head, F = p.n_fc;
  LayerCaShares all;
  int measured = 0;
  for (int l = 0; l < p.model.n_layer; ++l) {
    LayerCaShares s;
    s.layer = l;
    for (int h = 0; h < H; ++h)
      for (int f = 0; f < F; ++f) {
        const float v = p.ca(l, h, f);
        s.high += v > 0.4f;
        s.low += v < 0.15f;
        s.mean += v;
      }
    if (s.mean > 0) {  // (a layer without measurements, a sliding one's, stays out of the whole's shares)
      all.high += s.high;
      all.low += s.low;
      all.mean += s.mean;
      ++measured;
    }
    s.high /= H * F;
    s.low /= H * F;
    s.mean /= H * F;
    out.push_back(s);
  }
  const double cells = (double)std::max(measured, 1) * H * F;
  all.high /= cells;
  all.low /= cells;
  all.mean /= cells;
  out.push_back(all);
  return out;
}

namespace {
std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", 100 * x);
  return b;
}
std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// The chunks FASA decodes with by default: the layer's chosen ranking and count, group sharing.
std::vector<int> default_fcs(const Profile& p, int layer, int head) {
  const ChunkSetting s = p.setting(layer, FcRank::Auto, 0);
  return p.dominant_fcs(layer, head, s.n_fc, FcSharing::Group, s.rank);
}

}  // namespace

std::string profile_report_markdown(const Profile& p, const std::string& profile_path) {
  std::ostringstream md;
  const ModelFingerprint& m = p.model;
  md << "# FASA profile analysis\n\n"
     << "Profile `" << profile_path << "`: " << m.arch << ", " << m.n_layer << " layers, " << m.n_head << " query / "
     << m.n_head_kv << " KV heads of dim " << m.head_dim << " (" << p.n_fc << " frequency chunks, RoPE " << m.rope_layout
     << "), weights " << m.weights_hash << ".\n"
     << "Calibrated on `" << p.calibration_text << "` (" << p.calibration_tokens << " tokens, " << p.queries
     << " queries per head from position " << p.min_pos << "), CA_K with K = " << p.top_k << ", N_tip = " << p.n_tip
     << ".\n\n## Share of chunks by mean CA (paper Table 9 analogue)\n\n"
     << "| layer | CA > 0.4 (%) | CA < 0.15 (%) | mean CA |\n|---|---|---|---|\n";
  for (const auto& s : ca_shares(p))
    md << "| " << (s.layer < 0 ? std::string("all") : std::to_string(s.layer)) << " | " << pct(s.high) << " | "
       << pct(s.low) << " | " << pct(s.mean) << "% |\n";
  if (p.choice) {
    const RecallSettings& rs = p.choice->settings;
    md << "\n## Chunk choice: FASA's defaults per layer\n\n"
       << "Recall of full attention's top " << rs.top_k << " key(s) older than " << rs.window
       << " tokens within a candidate's top " << rs.pick << " on its chunks alone, weighted by each query's "
       << "attention on distant keys, on spans copied from far back (copies) and on running text (text); and "
       << "the share of copied records' value queries where the candidate ranks full attention's top key above "
       << "the same place in every look-alike record (look-alikes; - where not measured). Each layer keeps the "
       << "fewest chunks whose recall on copies and look-alikes reaches " << rs.target << ".\n\n"
       << "| layer | chosen | candidates: copies / look-alikes / text |\n|---|---|---|\n";
    for (int l = 0; l < m.n_layer; ++l) {
      if (!p.choice->chosen(l)) continue;
      md << "| " << l << " | " << p.choice->layers[l].n_fc << " by " << name_of(p.choice->layers[l].rank) << " |";
      for (const CandidateRecall& c : p.choice->measured[l]) {
        char cell[96], lookalikes[16] = "-";
        if (c.lookalikes >= 0) std::snprintf(lookalikes, sizeof lookalikes, "%.2f", c.lookalikes);
        std::snprintf(cell, sizeof cell, " %d by %s: %.2f / %s / %.2f;", c.setting.n_fc, name_of(c.setting.rank),
                      c.copies, lookalikes, c.text);
        md << cell;
      }
      md << " |\n";
    }
  } else {
    md << "\nNo chunk choice (a profile made before it, or too short a text): FASA ranks by agreement.\n";
  }
  md << "\n## Dominant chunks per head (best first)\n\n"
     << "| layer | head | KV head | chunks (head, by agreement) | chunks (group, as decoded by default) |\n"
     << "|---|---|---|---|---|\n";
  const int group = m.n_head / m.n_head_kv;
  for (int l = 0; l < m.n_layer; ++l)
    for (int h = 0; h < m.n_head; ++h)
      md << "| " << l << " | " << h << " | " << h / group << " | "
         << join(p.dominant_fcs(l, h, p.n_tip, FcSharing::Head, FcRank::Agreement)) << " | "
         << join(default_fcs(p, l, h)) << " |\n";
  return md.str();
}

nlohmann::json profile_report_json(const Profile& p) {
  nlohmann::json shares = nlohmann::json::array(), heads = nlohmann::json::array();
  for (const auto& s : ca_shares(p))
    shares.push_back({{"layer", s.layer < 0 ? nlohmann::json("all") : nlohmann::json(s.layer)},
                      {"share_ca_gt_0_4", s.high}, {"share_ca_lt_0_15", s.low}, {"mean_ca", s.mean}});
  for (int l = 0; l < p.model.n_layer; ++l)
    for (int h = 0; h < p.model.n_head; ++h)
      heads.push_back({{"layer", l}, {"head", h}, {"kv_head", h / (p.model.n_head / p.model.n_head_kv)},
                       {"fcs_head", p.dominant_fcs(l, h, p.n_tip, FcSharing::Head, FcRank::Agreement)},
                       {"fcs_group", default_fcs(p, l, h)}});
  nlohmann::json choice = nullptr;  // per layer: the chosen ranking and count, and every candidate's recall
  if (p.choice) {
    choice = nlohmann::json::array();
    for (int l = 0; l < p.model.n_layer; ++l) {
      if (!p.choice->chosen(l)) continue;
      nlohmann::json cands = nlohmann::json::array();
      for (const CandidateRecall& c : p.choice->measured[l])
        cands.push_back({{"fc_rank", name_of(c.setting.rank)}, {"fcs", c.setting.n_fc}, {"recall_copies", c.copies},
                         {"recall_text", c.text},
                         {"recall_lookalikes", c.lookalikes < 0 ? nlohmann::json() : nlohmann::json(c.lookalikes)}});
      choice.push_back({{"layer", l}, {"fc_rank", name_of(p.choice->layers[l].rank)}, {"fcs", p.choice->layers[l].n_fc},
                        {"candidates", cands}});
    }
  }
  return {{"n_tip", p.n_tip}, {"top_k", p.top_k}, {"ca_shares", shares}, {"dominant_fcs", heads}, {"chunk_choice", choice}};
}

std::vector<std::string> write_profile_heatmaps(const Profile& p, const std::string& dir) {
  std::vector<std::string> paths;
  for (int l = 0; l < p.model.n_layer; ++l) {
    Heatmap hm;
    hm.title = "mean CA, layer " + std::to_string(l) + " (K=" + std::to_string(p.top_k) + ")";
    hm.row_axis = "query head";
    hm.col_axis = "frequency chunk";
    hm.value_label = "mean CA";
    hm.cols = p.n_fc;
    for (int h = 0; h < p.model.n_head; ++h) {
      hm.row_labels.push_back("head " + std::to_string(h));
      for (int f = 0; f < p.n_fc; ++f) hm.values.push_back(p.ca(l, h, f));
      hm.marked.push_back(p.dominant_fcs(l, h, p.n_tip, FcSharing::Head, FcRank::Agreement));  // the profile's chunks per head
    }
    paths.push_back(dir + "/ca_layer_" + std::to_string(l) + ".png");
    write_heatmap_png(hm, paths.back());
  }
  return paths;
}

}  // namespace fasa
