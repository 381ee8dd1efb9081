#include "sparse/policy.h"

#include <sstream>

#include "calib/profile.h"
#include "model/model.h"
#include "sparse/fasa_policy.h"
#include "util/error.h"

namespace fasa {

std::vector<std::string> selector_names() { return {"full", "fasa"}; }

std::vector<int> parse_layer_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0) throw Error("--dense-layers: '" + item + "' is not a layer number");
    out.push_back(v);
  }
  return out;
}

std::unique_ptr<TokenSelector> make_selector(const PolicyOptions& o, const Model& model) {
  if (o.attn == "full") return std::make_unique<FullAttention>();
  if (o.attn == "fasa") {
    if (o.profile.empty()) throw Error("--attn fasa needs --profile PROFILE (make one with `fasa calibrate`)");
    const Profile p = load_profile(o.profile);
    check_profile_matches(p, model, o.profile);
    FasaOptions f;
    f.budget = Budget::parse(o.budget);
    f.n_tip = o.fcs;
    f.sharing = parse_fc_sharing(o.fc_sharing);
    f.dense_layers = parse_layer_list(o.dense_layers);
    f.sink = o.sink;
    f.recent = o.recent;
    return std::make_unique<FasaSelector>(p, model.config, f);
  }
  std::string known;
  for (auto& n : selector_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown attention policy '" + o.attn + "' (known: " + known + ")");
}

}  // namespace fasa
