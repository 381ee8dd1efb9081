#pragma once
// Labelled heatmap PNGs (rows x columns of values) for CA analysis, with chosen cells outlined and a
// colour bar ticked over the data's range.
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
  std::vector<float> values;            // [rows, cols]; the colours span their range
  std::vector<std::vector<int>> marked;  // [rows] or empty: columns outlined in each row (a head's chosen chunks)
};

// Throws fasa::Error naming the path when it cannot be written.
void write_heatmap_png(const Heatmap& h, const std::string& path);

}  // namespace fasa
