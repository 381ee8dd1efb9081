#include "calib/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <type_traits>

#include "calib/fc_layout.h"
#include "io/json_file.h"
#include "fasa/error.h"

namespace fasa {

using nlohmann::json;

namespace {

template <typename T>
T field(const json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) fail(path, std::string("missing field '") + key + "'");
  // nlohmann converts a float to an integer type unchecked (undefined past its range): found by fuzz_profile.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    if (!j.at(key).is_number_integer()) fail(path, std::string("field '") + key + "' is not an integer");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail(path, std::string("field '") + key + "' has the wrong type");
  }
}

int bounded(const json& j, const char* key, int lo, int hi, const std::string& path) {
  const int64_t v = field<int64_t>(j, key, path);
  if (v < lo || v > hi) fail(path, std::string("field '") + key + "' = " + std::to_string(v) + " is out of range");
  return (int)v;
}

// The indices of `score`, highest first (ties in index order).
std::vector<int> best_first(const std::vector<double>& score) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  return order;
}

}  // namespace

ModelFingerprint fingerprint(const Model& m) {
  const ModelConfig& c = m.config;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)m.weights.sampled_hash);
  return {c.arch, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_rot, c.n_vocab, rope_layout_name(c.rope_layout),
          hex};
}

std::vector<double> Profile::chunk_scores(int layer, int head, FcSharing sharing, FcRank rank) const {
  if (rank == FcRank::Auto) rank = setting(layer, rank, 0).rank;
  if (rank == FcRank::Magnitude && channel_qk.empty())
    throw Error("fc_rank 'magnitude': the profile has no channel statistics (made before DoubleSparse): make it "
                "again with `fasa calibrate`");
  const FcLayout layout(model.head_dim, model.n_rot, model.rope_layout == "neox" ? RopeLayout::Neox : RopeLayout::Normal);
  const int group = model.n_head / model.n_head_kv;
  const int first = sharing == FcSharing::Group ? head / group * group : head;
  const int count = sharing == FcSharing::Group ? group : 1;
  std::vector<double> row(n_fc, 0.0);
  for (int h = first; h < first + count; ++h)
    for (int f = 0; f < n_fc; ++f) {
      if (rank == FcRank::Agreement) {
        row[f] += ca(layer, h, f) / count;
      } else {
        const float* channels = &channel_qk[((size_t)layer * model.n_head + h) * model.head_dim];
        const auto [d0, d1] = layout.dims(f);
        row[f] += (channels[d0] + channels[d1]) / count;
      }
    }
  return row;
}

std::vector<int> Profile::dominant_fcs(int layer, int head, int n, FcSharing sharing, FcRank rank) const {
  std::vector<int> order = best_first(chunk_scores(layer, head, sharing, rank));
  order.resize(std::min(n, n_fc));
  return order;
}

ChunkSetting Profile::setting(int layer, FcRank rank, int n) const {
  ChunkSetting chosen{FcRank::Agreement, n_tip};
  if (choice && layer < (int)choice->layers.size() && choice->layers[layer].n_fc > 0) chosen = choice->layers[layer];
  if (rank != FcRank::Auto) chosen = {rank, n_tip};
  if (n > 0) chosen.n_fc = n;
  return chosen;
}

const CandidateRecall* ChunkChoice::chosen(int layer) const {
  for (const CandidateRecall& c : measured[layer])
    if (c.setting == layers[layer]) return &c;
  return nullptr;
}

std::vector<int> adaptive_chunk_counts(const Profile& p, int n_avg, FcSharing sharing, FcRank rank,
                                       const std::vector<char>& sparse_layer) {
  const int H = p.model.n_head, F = p.n_fc, unit_heads = sharing == FcSharing::Group ? H / p.model.n_head_kv : 1;
  struct Unit {
    int layer, head;            // the unit's first query head
    std::vector<double> share;  // [F] best first: each chunk's share of the unit's total score
  };
  std::vector<Unit> units;
  for (int l = 0; l < p.model.n_layer; ++l) {
    if (!sparse_layer[l]) continue;
    for (int h = 0; h < H; h += unit_heads) {
      Unit u{l, h, {}};
      double total = 0;
      const std::vector<double> score = p.chunk_scores(l, h, sharing, rank);
      for (int f : best_first(score)) {
        u.share.push_back(score[f]);
        total += score[f];
      }
      for (double& x : u.share) x = total > 0 ? x / total : 1.0 / F;
      units.push_back(std::move(u));
    }
  }
  const int64_t budget = (int64_t)n_avg * (int64_t)units.size();
  auto chunks_for = [&](const Unit& u, double tau) {  // fewest chunks holding a share tau
    double held = 0;
    for (int n = 1; n <= F; ++n)
      if ((held += u.share[n - 1]) >= tau - 1e-12) return n;
    return F;
  };
  auto total_for = [&](double tau) {
    int64_t t = 0;
    for (const Unit& u : units) t += chunks_for(u, tau);
    return t;
  };
  double lo = 0, hi = 1;  // total_for(lo) <= budget (1 chunk each, n_avg >= 1)
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (total_for(mid) <= budget ? lo : hi) = mid;
  }
  std::vector<int> n(units.size());
  int64_t used = 0;
  for (size_t i = 0; i < units.size(); ++i) used += n[i] = chunks_for(units[i], lo);
  while (used < budget) {  // the rest, to the largest next shares
    size_t best = units.size();
    for (size_t i = 0; i < units.size(); ++i)
      if (n[i] < F && (best == units.size() || units[i].share[n[i]] > units[best].share[n[best]])) best = i;
    if (best == units.size()) break;
    ++n[best];
    ++used;
  }
  std::vector<int> out((size_t)p.model.n_layer * H, 0);
  for (size_t i = 0; i < units.size(); ++i)
    for (int g = units[i].head; g < units[i].head + unit_heads; ++g) out[(size_t)units[i].layer * H + g] = n[i];
  return out;
}

void save_profile(const Profile& p, const std::string& path) {
  json heads = json::array();
  for (int l = 0; l < p.model.n_layer; ++l)
    for (int h = 0; h < p.model.n_head; ++h) {
      std::vector<float> row(p.mean_ca.begin() + ((size_t)l * p.model.n_head + h) * p.n_fc,
                             p.mean_ca.begin() + ((size_t)l * p.model.n_head + h + 1) * p.n_fc);
      for (auto& x : row) x = std::round(x * 1e6f) / 1e6f;
      heads.push_back({{"layer", l}, {"head", h}, {"fcs", p.dominant_fcs(l, h, p.n_tip, FcSharing::Head, FcRank::Agreement)}, {"ca", row}});
      if (!p.channel_qk.empty())
        heads.back()["channels"] = std::vector<float>(p.channel_qk.begin() + ((size_t)l * p.model.n_head + h) * p.model.head_dim,
                                                      p.channel_qk.begin() + ((size_t)l * p.model.n_head + h + 1) * p.model.head_dim);
    }
  const ModelFingerprint& f = p.model;
  json choice;
  if (p.choice) {
    const RecallSettings& rs = p.choice->settings;
    choice = {{"window", rs.window}, {"topk", rs.top_k}, {"pick", rs.pick}, {"target", rs.target}, {"layers", json::array()}};
    auto recall = [](double x) { return std::round(x * 1e4) / 1e4; };
    for (int l = 0; l < (int)p.choice->layers.size(); ++l) {
      if (p.choice->layers[l].n_fc == 0) continue;  // not measured
      json cands = json::array();
      for (const CandidateRecall& c : p.choice->measured[l]) {
        cands.push_back({{"fc_rank", name_of(c.setting.rank)}, {"fcs", c.setting.n_fc}, {"copies", recall(c.copies)},
                         {"text", recall(c.text)}});
        if (c.lookalikes >= 0) cands.back()["lookalikes"] = recall(c.lookalikes);
      }
      choice["layers"].push_back({{"layer", l}, {"fc_rank", name_of(p.choice->layers[l].rank)},
                                  {"fcs", p.choice->layers[l].n_fc}, {"candidates", cands}});
    }
  }
  json j = {{"format", "fasa-profile"},
            {"version", Profile::kVersion},
            {"model",
             {{"arch", f.arch}, {"n_layer", f.n_layer}, {"n_head", f.n_head}, {"n_head_kv", f.n_head_kv},
              {"head_dim", f.head_dim}, {"n_rot", f.n_rot}, {"n_vocab", f.n_vocab}, {"rope_layout", f.rope_layout},
              {"weights_hash", f.weights_hash}}},
            {"calibration",
             {{"text", p.calibration_text}, {"tokens", p.calibration_tokens}, {"queries_per_head", p.queries},
              {"topk", p.top_k}, {"min_pos", p.min_pos}}},
            {"n_fc", p.n_fc},
            {"n_tip", p.n_tip},
            {"heads", heads}};
  if (p.choice) j["chunk_choice"] = choice;
  std::ofstream out(path);
  if (!out) fail(path, "cannot write profile");
  out << j.dump(1) << "\n";
  if (!out) fail(path, "write failed");
}

int default_n_tip(const ModelConfig& c) { return std::max(1, c.n_rot / 8); }

Profile synthetic_profile(const Model& m, int n_tip, uint64_t seed) {
  const ModelConfig& c = m.config;
  Profile p;
  p.model = fingerprint(m);
  p.calibration_text = "(synthetic: seeded random chunks, for speed measurements)";
  p.n_fc = FcLayout(c).n_fc();
  p.n_tip = std::clamp(n_tip, 1, p.n_fc);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  p.mean_ca.resize((size_t)c.n_layer * c.n_head * p.n_fc);
  for (auto& v : p.mean_ca) v = u(rng);
  p.channel_qk.resize((size_t)c.n_layer * c.n_head * c.head_dim);
  for (auto& v : p.channel_qk) v = u(rng);
  return p;
}

namespace {

FcRank read_rank(const json& j, const std::string& path) {
  const std::string r = field<std::string>(j, "fc_rank", path);
  for (FcRank k : {FcRank::Agreement, FcRank::Magnitude})
    if (r == name_of(k)) return k;
  fail(path, "chunk_choice: fc_rank '" + r + "' is neither 'agreement' nor 'magnitude'");
}

double read_recall(const json& j, const char* key, const std::string& path) {
  const double x = field<double>(j, key, path);
  if (!(x >= 0 && x <= 1)) fail(path, std::string("chunk_choice: '") + key + "' must lie in [0, 1]");
  return x;
}

// The chunk choice (made since far-recall checks); layers it does not list were not measured.
ChunkChoice read_choice(const json& j, const Profile& p, const std::string& path) {
  ChunkChoice c;
  c.settings.window = bounded(j, "window", 1, 1 << 24, path);
  c.settings.top_k = bounded(j, "topk", 1, 1 << 24, path);
  c.settings.pick = bounded(j, "pick", c.settings.top_k, 1 << 24, path);
  c.settings.target = read_recall(j, "target", path);
  c.layers.assign(p.model.n_layer, ChunkSetting{FcRank::Agreement, 0});
  c.measured.resize(p.model.n_layer);
  const json& layers = j.contains("layers") ? j["layers"] : json();
  if (!layers.is_array()) fail(path, "chunk_choice: 'layers' must be a list");
  for (const json& e : layers) {
    const int l = bounded(e, "layer", 0, p.model.n_layer - 1, path);
    if (c.layers[l].n_fc > 0) fail(path, "chunk_choice: layer " + std::to_string(l) + " is listed twice");
    c.layers[l] = {read_rank(e, path), bounded(e, "fcs", 1, p.n_fc, path)};
    const json& cands = e.contains("candidates") ? e["candidates"] : json();
    if (!cands.is_array() || cands.size() > 64) fail(path, "chunk_choice: 'candidates' must be a list of at most 64");
    for (const json& m : cands)  // (no "lookalikes" in profiles made before them)
      c.measured[l].push_back({{read_rank(m, path), bounded(m, "fcs", 1, p.n_fc, path)}, read_recall(m, "copies", path),
                               read_recall(m, "text", path),
                               m.contains("lookalikes") ? read_recall(m, "lookalikes", path) : -1.0});
    if (!c.chosen(l)) fail(path, "chunk_choice: layer " + std::to_string(l) + "'s choice is none of its candidates");
  }
  return c;
}

Profile read_profile(const std::string& path) {
  const json j = read_json_file(path, "profile");
  if (!j.is_object() || j.value("format", std::string()) != "fasa-profile") fail(path, "not a fasa profile");
  const int version = bounded(j, "version", 0, 1 << 20, path);
  if (version != Profile::kVersion)
    fail(path, "profile version " + std::to_string(version) + " is not supported (expected " +
                   std::to_string(Profile::kVersion) + ")");
  Profile p;
  const json& m = j.contains("model") ? j["model"] : json();
  ModelFingerprint& f = p.model;
  f.arch = field<std::string>(m, "arch", path);
  f.n_layer = bounded(m, "n_layer", 1, 1024, path);
  f.n_head = bounded(m, "n_head", 1, 1024, path);
  f.n_head_kv = bounded(m, "n_head_kv", 1, f.n_head, path);
  f.head_dim = bounded(m, "head_dim", 2, 1024, path);
  f.n_rot = bounded(m, "n_rot", 2, f.head_dim, path);
  f.n_vocab = bounded(m, "n_vocab", 1, 1 << 22, path);
  f.rope_layout = field<std::string>(m, "rope_layout", path);
  f.weights_hash = field<std::string>(m, "weights_hash", path);
  if (f.n_head % f.n_head_kv != 0) fail(path, "n_head_kv does not divide n_head");
  const json& c = j.contains("calibration") ? j["calibration"] : json();
  p.calibration_text = field<std::string>(c, "text", path);
  p.calibration_tokens = field<int64_t>(c, "tokens", path);
  p.queries = field<int64_t>(c, "queries_per_head", path);
  p.top_k = bounded(c, "topk", 1, 1 << 24, path);
  p.min_pos = field<int64_t>(c, "min_pos", path);
  p.n_fc = bounded(j, "n_fc", 1, 512, path);
  if (p.n_fc != FcLayout(f.head_dim, f.n_rot, RopeLayout::Normal).n_fc())
    fail(path, "n_fc " + std::to_string(p.n_fc) + " does not match head_dim " + std::to_string(f.head_dim));
  p.n_tip = bounded(j, "n_tip", 1, p.n_fc, path);
  const json& heads = j.contains("heads") ? j["heads"] : json();
  const size_t n_heads = (size_t)f.n_layer * f.n_head;
  if (!heads.is_array() || heads.size() != n_heads)
    fail(path, "'heads' must list " + std::to_string(n_heads) + " (layer, head) entries");
  p.mean_ca.assign(n_heads * p.n_fc, 0.0f);
  // DoubleSparse's channels: in every entry or in none (profiles made before them)
  const bool channels = heads[0].contains("channels");
  if (channels) p.channel_qk.assign(n_heads * f.head_dim, 0.0f);
  std::vector<char> seen(n_heads, 0);
  for (const json& e : heads) {
    const int l = bounded(e, "layer", 0, f.n_layer - 1, path), h = bounded(e, "head", 0, f.n_head - 1, path);
    const size_t lh = (size_t)l * f.n_head + h;
    if (seen[lh]++) fail(path, "duplicate entry for layer " + std::to_string(l) + " head " + std::to_string(h));
    const auto row = field<std::vector<float>>(e, "ca", path);
    if ((int)row.size() != p.n_fc) fail(path, "layer " + std::to_string(l) + " head " + std::to_string(h) + ": 'ca' must hold n_fc values");
    for (float x : row)
      if (!std::isfinite(x) || x < 0 || x > 1) fail(path, "mean CA values must lie in [0, 1]");
    std::copy(row.begin(), row.end(), p.mean_ca.begin() + lh * p.n_fc);
    if (e.contains("channels") != channels) fail(path, "'channels' must be in every (layer, head) entry or in none");
    if (!channels) continue;
    const auto qk = field<std::vector<float>>(e, "channels", path);
    if ((int)qk.size() != f.head_dim)
      fail(path, "layer " + std::to_string(l) + " head " + std::to_string(h) + ": 'channels' must hold head_dim values");
    for (float x : qk)
      if (!std::isfinite(x) || x < 0) fail(path, "channel statistics must be finite and >= 0");
    std::copy(qk.begin(), qk.end(), p.channel_qk.begin() + lh * f.head_dim);
  }
  if (j.contains("chunk_choice")) p.choice = read_choice(j["chunk_choice"], p, path);
  return p;
}

}  // namespace

Profile load_profile(const std::string& path) {
  return with_json_errors(path, [&] { return read_profile(path); });
}

void check_profile_matches(const Profile& p, const Model& m, const std::string& path) {
  const ModelFingerprint mine = fingerprint(m);
  if (p.model == mine) return;
  auto show = [](const ModelFingerprint& f) {
    return f.arch + " " + std::to_string(f.n_layer) + "L " + std::to_string(f.n_head) + "/" +
           std::to_string(f.n_head_kv) + " heads x " + std::to_string(f.head_dim) + " (rot " + std::to_string(f.n_rot) +
           ", " + f.rope_layout + "), vocab " + std::to_string(f.n_vocab) + ", weights " + f.weights_hash;
  };
  // The same shape with other weights is another quantization, a fine-tune, or another model of that
  // shape: without the unquantized weights they look alike, so a profile is keyed to the exact weights
  // and the error says how to get one for this file.
  ModelFingerprint shape = mine;
  shape.weights_hash = p.model.weights_hash;
  if (p.model == shape)
    fail(path, "profile was calibrated for another model: the shape matches but the weights differ (profile " +
                   p.model.weights_hash + ", " + m.path + " " + mine.weights_hash +
                   "; another quantization or fine-tune?). Calibrate for this file: fasa calibrate -m " + m.path +
                   " -f TEXT -o PROFILE");
  fail(path, "profile was calibrated for another model: profile has " + show(p.model) + "; model " + m.path +
                 " has " + show(mine));
}

}  // namespace fasa
