#pragma once
// Labelled heatmap PNGs (rows x columns of values in [0, 1]) for CA analysis, with chosen cells
// outlined and a colour bar with ticks.
#include <string>
#include <vector>

namespace fasa {

struct Heatmap {
  std::string title;
  std::string row_axis;                 // e.g. "query head"
  std::string col_axis;                 // e.g. "frequency chunk"
  std::string value_label;              // the colour bar's, e.g. "mean CA"
  std::vector<std::string> row_labels;  // [rows]
  int cols = 0;
  std::vector<float> values;            // [rows, cols], clamped to [0, 1]
  std::vector<std::vector<int>> marked;  // [rows] or empty: columns outlined in each row (a head's chosen chunks)
};

// Throws fasa::Error naming the path when it cannot be written.
void write_heatmap_png(const Heatmap& h, const std::string& path);

}  // namespace fasa
