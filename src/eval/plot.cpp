#include "eval/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "eval/canvas.h"
#include "fasa/error.h"

namespace fasa {

void write_records_plot(const std::vector<EvalRecord>& records, const std::string& metric, const std::string& path) {
  std::vector<std::string> budgets, series;
  std::map<std::string, std::map<std::string, double>> y;  // series -> budget -> value
  auto add_unique = [](std::vector<std::string>& v, const std::string& s) {
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  for (const auto& r : records) {
    if (r.metric != metric || (!r.task_type.empty() && r.task_type != "all")) continue;
    const std::string name = r.policy + (r.variant.empty() ? "" : " [" + r.variant + "]");
    add_unique(budgets, r.budget);
    add_unique(series, name);
    y[name][r.budget] = r.value;
  }
  if (series.empty()) fail(path, "no '" + metric + "' records to plot");
  double lo = INFINITY, hi = -INFINITY;
  for (auto& [s, pts] : y)
    for (auto& [b, v] : pts) lo = std::min(lo, v), hi = std::max(hi, v);
  if (hi - lo < 1e-12) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;

  int legend_w = 0;
  for (auto& s : series) legend_w = std::max(legend_w, Canvas::text_width(s));
  const int left = 110, top = 50, pw = 520, ph = 360, right = legend_w + 60;
  Canvas c(left + pw + right, top + ph + 80);
  c.text(left, 12, metric + " vs budget", 3);
  c.line(left, top, left, top + ph, {0, 0, 0}, 2);
  c.line(left, top + ph, left + pw, top + ph, {0, 0, 0}, 2);
  auto px = [&](size_t i) { return left + (int)((i + 0.5) * pw / budgets.size()); };
  auto py = [&](double v) { return top + (int)((hi - v) / (hi - lo) * ph); };
  for (int t = 0; t <= 4; ++t) {  // y ticks
    const double v = lo + (hi - lo) * t / 4;
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    c.line(left - 6, py(v), left, py(v), {0, 0, 0}, 2);
    c.text(left - 12 - Canvas::text_width(b), py(v) - 6, b);
  }
  for (size_t i = 0; i < budgets.size(); ++i) {
    c.line(px(i), top + ph, px(i), top + ph + 6, {0, 0, 0}, 2);
    c.text(px(i) - Canvas::text_width(budgets[i]) / 2, top + ph + 12, budgets[i]);
  }
  c.text(left + pw / 2 - Canvas::text_width("budget (tokens per head)") / 2, top + ph + 44, "budget (tokens per head)");
  c.text(8, top - 24, metric);
  static const Rgb palette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
                                {140, 86, 75}, {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
  for (size_t s = 0; s < series.size(); ++s) {
    const Rgb col = palette[s % 10];
    int prev_x = -1, prev_y = -1;
    for (size_t i = 0; i < budgets.size(); ++i) {
      auto it = y[series[s]].find(budgets[i]);
      if (it == y[series[s]].end()) continue;
      const int x = px(i), yy = py(it->second);
      if (prev_x >= 0) c.line(prev_x, prev_y, x, yy, col, 3);
      c.rect(x - 4, yy - 4, x + 4, yy + 4, col);
      prev_x = x;
      prev_y = yy;
    }
    const int ly = top + 10 + (int)s * 22;
    c.rect(left + pw + 20, ly, left + pw + 40, ly + 12, col);
    c.text(left + pw + 46, ly - 1, series[s]);
  }
  c.save_png(path);
}

}  // namespace fasa
