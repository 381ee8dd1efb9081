#include "draw/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "draw/figure.h"
#include "fasa/error.h"

namespace fasa {

void write_records_plot(const std::vector<EvalRecord>& records, const std::string& metric, const std::string& path) {
  std::vector<std::string> budgets, series;
  std::map<std::string, std::map<std::string, double>> y;  // series -> budget -> value
  auto add_unique = [](std::vector<std::string>& v, const std::string& s) {
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  const bool percent = metric_in_percent(metric);  // as the tables show them
  for (const auto& r : records) {
    if (r.metric != metric || (!r.task_type.empty() && r.task_type != "all")) continue;
    const std::string name = r.policy + (r.variant.empty() ? "" : " [" + r.variant + "]");
    add_unique(budgets, r.budget);
    add_unique(series, name);
    y[name][r.budget] = percent ? 100 * r.value : r.value;
  }
  if (series.empty()) fail(path, "no '" + metric + "' records to plot");
  double lo = INFINITY, hi = -INFINITY;
  for (auto& [s, pts] : y)
    for (auto& [b, v] : pts) lo = std::min(lo, v), hi = std::max(hi, v);
  const std::vector<double> ticks = nice_ticks(lo, hi);
  lo = ticks.front(), hi = ticks.back();

  const bool ca = metric == "ca";
  const std::string x_axis = ca ? "top-K (tokens each policy selects)" : "budget (tokens per head, or share of the context)";
  const std::string y_axis = metric + (percent ? " (%)" : metric == "kld" ? " (nats)" : "");
  Figure probe(1, 1);
  double legend_w = 0;
  for (auto& s : series) legend_w = std::max(legend_w, probe.text_width(s, 12));
  const double left = 80, top = 48, pw = 520, ph = 340;
  Figure f((int)(left + pw + legend_w + 60), (int)(top + ph + 70));
  f.text(left, 28, metric + " vs " + (ca ? "top-K" : "budget"), 16);
  f.line(left, top, left, top + ph, {0, 0, 0});
  f.line(left, top + ph, left + pw, top + ph, {0, 0, 0});
  auto px = [&](size_t i) { return left + (i + 0.5) * pw / budgets.size(); };
  auto py = [&](double v) { return top + (hi - v) / (hi - lo) * ph; };
  for (double v : ticks) {  // y ticks and light grid lines
    f.line(left + 1, py(v), left + pw, py(v), {0.9, 0.9, 0.9}, 1);
    f.line(left - 5, py(v), left, py(v), {0, 0, 0}, 1);
    f.text(left - 8, py(v) + 4, tick_label(v, ticks[1] - ticks[0]), 11, 1);
  }
  for (size_t i = 0; i < budgets.size(); ++i) {
    f.line(px(i), top + ph, px(i), top + ph + 5, {0, 0, 0}, 1);
    f.text(px(i), top + ph + 19, budgets[i], 11, 0.5);
  }
  f.text(left + pw / 2, top + ph + 44, x_axis, 13, 0.5);
  f.text(22, top + ph / 2, y_axis, 13, 0.5, {0, 0, 0}, -1.5707963);
  static const Rgb palette[] = {{0.12, 0.47, 0.71}, {1.0, 0.5, 0.05},  {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                                {0.58, 0.4, 0.74},  {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.5, 0.5, 0.5},
                                {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}};
  cairo_t* cr = f.cr();
  for (size_t s = 0; s < series.size(); ++s) {
    const Rgb col = palette[s % 10];
    f.color(col);
    cairo_set_line_width(cr, 2.5);
    bool started = false;
    for (size_t i = 0; i < budgets.size(); ++i) {
      auto it = y[series[s]].find(budgets[i]);
      if (it == y[series[s]].end()) continue;
      started ? cairo_line_to(cr, px(i), py(it->second)) : cairo_move_to(cr, px(i), py(it->second));
      started = true;
    }
    cairo_stroke(cr);
    for (size_t i = 0; i < budgets.size(); ++i) {
      auto it = y[series[s]].find(budgets[i]);
      if (it == y[series[s]].end()) continue;
      cairo_arc(cr, px(i), py(it->second), 4, 0, 2 * M_PI);
      cairo_fill(cr);
    }
    const double ly = top + 12 + s * 22;
    f.line(left + pw + 16, ly - 4, left + pw + 38, ly - 4, col, 2.5);
    f.text(left + pw + 44, ly, series[s], 12);
  }
  f.save_png(path);
}

}  // namespace fasa
