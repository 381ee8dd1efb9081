#pragma once
#include <string>
#include <vector>

#include "eval/records.h"

namespace fasa {

// Line plot of one metric against the budget, one line per policy (and variant), with labelled axes
// and a legend. `metric` picks the records ("kld", "accuracy", "ca", ...); for retrieval only the
// overall ("all") rows are drawn. With `x_metric` ("kv_kib": KV read per step), each point sits at that
// metric's value for the same policy and budget, on a log axis: fidelity against cost. Values that
// span more than two powers of ten are drawn on a log axis too (KL from 0.01 to 3). Throws
// fasa::Error when no record matches or the file cannot be written.
void write_records_plot(const std::vector<EvalRecord>& records, const std::string& metric, const std::string& path,
                        const std::string& x_metric = "");

}  // namespace fasa
