#include "draw/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "draw/figure.h"
#include "fasa/error.h"

namespace fasa {

namespace {

struct Point {
  double x, y;  // x: the budget's column, or the x metric's value
};

// A line per policy (and variant): its points in the order they are drawn.
struct Series {
  std::vector<std::string> names;
  std::map<std::string, std::vector<Point>> points;
  std::vector<std::string> budgets;  // x tick labels where x is the budget's column
};

bool plotted(const EvalRecord& r) { return r.task_type.empty() || r.task_type == "all"; }
std::string series_name(const EvalRecord& r) { return r.policy + (r.variant.empty() ? "" : " [" + r.variant + "]"); }

Series collect(const std::vector<EvalRecord>& records, const std::string& metric, const std::string& x_metric) {
  Series s;
  std::map<std::string, double> x_of;  // series name + budget -> the x metric's value
  for (const auto& r : records)
    if (plotted(r) && r.metric == x_metric) x_of[series_name(r) + '\n' + r.budget] = r.value;
  const bool percent = metric_in_percent(metric);  // as the tables show them
  for (const auto& r : records) {
    if (r.metric != metric || !plotted(r)) continue;
    const std::string name = series_name(r);
    double x = 0;
    if (x_metric.empty()) {
      auto it = std::find(s.budgets.begin(), s.budgets.end(), r.budget);
      x = (double)(it - s.budgets.begin());
      if (it == s.budgets.end()) s.budgets.push_back(r.budget);
    } else {
      auto it = x_of.find(name + '\n' + r.budget);
      if (it == x_of.end() || !(it->second > 0)) continue;  // log axis: only positive values
      x = std::log2(it->second);
    }
    if (!s.points.count(name)) s.names.push_back(name);
    s.points[name].push_back({x, percent ? 100 * r.value : r.value});
  }
  for (auto& [name, pts] : s.points) std::sort(pts.begin(), pts.end(), [](Point a, Point b) { return a.x < b.x; });
  return s;
}

// The plotting area: its place on the figure and the data range it shows.
struct Frame {
  double left, top, pw, ph;
  double x_lo, x_hi, y_lo, y_hi;
  double px(double x) const { return left + (x - x_lo) / (x_hi - x_lo) * pw; }
  double py(double y) const { return top + (y_hi - y) / (y_hi - y_lo) * ph; }
};

// Each series as a line with dots at its points, and its entry in the legend right of the frame.
void draw_lines(const Figure& f, const Frame& fr, const Series& s) {
  static const Rgb palette[] = {{0.12, 0.47, 0.71}, {1.0, 0.5, 0.05},  {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                                {0.58, 0.4, 0.74},  {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.5, 0.5, 0.5},
                                {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}};
  cairo_t* cr = f.cr();
  for (size_t i = 0; i < s.names.size(); ++i) {
    const Rgb col = palette[i % 10];
    const auto& pts = s.points.at(s.names[i]);
    f.color(col);
    cairo_set_line_width(cr, 2.5);
    for (size_t j = 0; j < pts.size(); ++j)
      j ? cairo_line_to(cr, fr.px(pts[j].x), fr.py(pts[j].y)) : cairo_move_to(cr, fr.px(pts[j].x), fr.py(pts[j].y));
    cairo_stroke(cr);
    for (Point p : pts) {
      cairo_arc(cr, fr.px(p.x), fr.py(p.y), 4, 0, 2 * M_PI);
      cairo_fill(cr);
    }
    const double ly = fr.top + 12 + i * 22;
    f.line(fr.left + fr.pw + 16, ly - 4, fr.left + fr.pw + 38, ly - 4, col, 2.5);
    f.text(fr.left + fr.pw + 44, ly, s.names[i], 12);
  }
}

// A log axis's tick at `value` (a power of two or ten): whole numbers as such, fractions to their digit.
std::string log_tick_label(double value) { return tick_label(value, std::min(1.0, value / 10)); }

std::string y_label(const std::string& metric) {
  return metric + (metric_in_percent(metric) ? " (%)" : metric == "kld" ? " (nats)" : "");
}

}  // namespace

void write_records_plot(const std::vector<EvalRecord>& records, const std::string& metric, const std::string& path,
                        const std::string& x_metric) {
  Series s = collect(records, metric, x_metric);
  if (s.names.empty())
    fail(path, "no '" + metric + "' records" + (x_metric.empty() ? "" : " with a positive '" + x_metric + "'") + " to plot");
  double lo = INFINITY, hi = -INFINITY, x_lo = INFINITY, x_hi = -INFINITY;
  for (auto& [name, pts] : s.points)
    for (Point p : pts) lo = std::min(lo, p.y), hi = std::max(hi, p.y), x_lo = std::min(x_lo, p.x), x_hi = std::max(x_hi, p.x);
  // y: linear, or log10 with a tick at each power of ten where the values span more than two of them
  const bool log_y = lo > 0 && hi > 100 * lo;
  std::vector<double> ticks;
  if (log_y) {
    for (auto& [name, pts] : s.points)
      for (Point& p : pts) p.y = std::log10(p.y);
    for (double d = std::floor(std::log10(lo)); d <= std::ceil(std::log10(hi)); ++d) ticks.push_back(d);
  } else {
    ticks = nice_ticks(lo, hi);
  }
  lo = ticks.front(), hi = ticks.back();
  auto y_tick = [&](double v) {
    return log_y ? log_tick_label(std::pow(10, v)) : tick_label(v, ticks[1] - ticks[0]);
  };
  // x: the budgets as evenly spaced columns, or log2 of the x metric with a tick at each power of two
  const bool by_budget = x_metric.empty();
  if (by_budget) x_lo = -0.5, x_hi = (double)s.budgets.size() - 0.5;
  else x_lo = std::floor(x_lo), x_hi = std::max(std::ceil(x_hi), x_lo + 1);

  const bool ca = metric == "ca";
  const std::string x_name = !by_budget ? x_metric : ca ? "top-K" : "budget";
  const std::string x_axis = !by_budget ? x_metric + " (log scale)"
                             : ca       ? "top-K (tokens each policy selects)"
                                        : "budget (tokens per head, or share of the context)";
  Figure probe(1, 1);
  double legend_w = 0;
  for (auto& n : s.names) legend_w = std::max(legend_w, probe.text_width(n, 12));
  const Frame fr{80, 48, 520, 340, x_lo, x_hi, lo, hi};
  Figure f((int)(fr.left + fr.pw + legend_w + 60), (int)(fr.top + fr.ph + 70));
  f.text(fr.left, 28, metric + " vs " + x_name, 16);
  f.line(fr.left, fr.top, fr.left, fr.top + fr.ph, {0, 0, 0});
  f.line(fr.left, fr.top + fr.ph, fr.left + fr.pw, fr.top + fr.ph, {0, 0, 0});
  for (double v : ticks) {  // y ticks and light grid lines
    f.line(fr.left + 1, fr.py(v), fr.left + fr.pw, fr.py(v), {0.9, 0.9, 0.9}, 1);
    f.line(fr.left - 5, fr.py(v), fr.left, fr.py(v), {0, 0, 0}, 1);
    f.text(fr.left - 8, fr.py(v) + 4, y_tick(v), 11, 1);
  }
  const int n_x = by_budget ? (int)s.budgets.size() : (int)(x_hi - x_lo) + 1;
  for (int i = 0; i < n_x; ++i) {
    const double x = by_budget ? i : x_lo + i;
    f.line(fr.px(x), fr.top + fr.ph, fr.px(x), fr.top + fr.ph + 5, {0, 0, 0}, 1);
    f.text(fr.px(x), fr.top + fr.ph + 19, by_budget ? s.budgets[i] : log_tick_label(std::exp2(x)), 11, 0.5);
  }
  f.text(fr.left + fr.pw / 2, fr.top + fr.ph + 44, x_axis, 13, 0.5);
  f.text(22, fr.top + fr.ph / 2, y_label(metric) + (log_y ? ", log scale" : ""), 13, 0.5, {0, 0, 0}, -1.5707963);
  draw_lines(f, fr, s);
  f.save_png(path);
}

}  // namespace fasa
