#pragma once
// Evaluation results as flat records, and their markdown / JSON / CSV renderings.
#include <cstdint>
#include <string>
#include <vector>

namespace fasa {

struct EvalRecord {
  std::string eval;       // "ppl", "retrieval", "ca"
  std::string policy;     // e.g. "fasa"
  std::string variant;    // the policy options that shaped it, e.g. "fcs=8 sharing=group dense=0"
  std::string budget;     // as given ("64", "0.1"); JSON and CSV give it as a number and a unit ("tokens", "share")
  std::string metric;     // "nll", "ppl", "kld", "top1", "accuracy", "exact", "ca", "kv_kib" (KV read per decoded token)
  std::string task_type;  // retrieval: the task type or "all"; empty otherwise
  int topk = 0;           // ca: K
  double value = 0;
  int64_t n = 0;          // predictions, tasks or (query, head) pairs behind the value (kv_kib: decode steps)
};

// Shares (top-1 agreement, accuracy, exact, CA) are shown in percent in every format, the rest as measured.
bool metric_in_percent(const std::string& metric);

// One markdown table per (metric, task type): a row per policy/variant, a column per budget.
std::string records_markdown(const std::vector<EvalRecord>& records);
// The records as `--json` writes them (and Python's fasa.eval returns them): a JSON array text.
std::string records_json(const std::vector<EvalRecord>& records);
void write_records_json(const std::vector<EvalRecord>& records, const std::string& path);
// Records a `--json` file holds, as they were (a share budget spelled as a percentage); fasa::Error
// naming the file where it is not such a file.
std::vector<EvalRecord> read_records_json(const std::string& path);
void write_records_csv(const std::vector<EvalRecord>& records, const std::string& path);

}  // namespace fasa
