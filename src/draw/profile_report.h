#pragma once
// What a profile says, as the paper reports it: per-layer shares of chunks with high (> 0.4) and low
// (< 0.15) mean CA (its Table 9), the dominant chunks of every head, and CA heatmaps.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calib/profile.h"

namespace fasa {

struct LayerCaShares {
  int layer = -1;         // -1: all layers
  double high = 0;        // share of (head, chunk) cells with mean CA > 0.4
  double low = 0;         // share with mean CA < 0.15
  double mean = 0;        // mean CA
};

std::vector<LayerCaShares> ca_shares(const Profile& p);  // one per layer, then the overall row

std::string profile_report_markdown(const Profile& p, const std::string& profile_path);
nlohmann::json profile_report_json(const Profile& p);

// Writes one heatmap per layer (query heads x chunks) as DIR/ca_layer_<l>.png; returns the paths.
std::vector<std::string> write_profile_heatmaps(const Profile& p, const std::string& dir);

}  // namespace fasa
