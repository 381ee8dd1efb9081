#include "eval/records.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fasa/error.h"
#include "fasa/options.h"
#include "io/json_file.h"

namespace fasa {

bool metric_in_percent(const std::string& metric) {
  return metric == "top1" || metric == "accuracy" || metric == "exact" || metric == "ca" || metric == "first_equal";
}

namespace {
bool in_percent(const EvalRecord& r) { return metric_in_percent(r.metric); }
double shown(const EvalRecord& r) { return in_percent(r) ? 100 * r.value : r.value; }
std::string unit(const EvalRecord& r) {
  return in_percent(r) ? "%" : r.metric == "kld" || r.metric == "nll" ? "nats" : r.metric == "kv_kib" ? "KiB" : "";
}

// The budget as a number for JSON and CSV: a token count, or a share of the context (budget_unit).
nlohmann::json budget_value(const EvalRecord& r) {
  const Budget b = Budget::parse(r.budget);
  return b.fraction ? nlohmann::json(b.value) : nlohmann::json((int64_t)b.value);
}
const char* budget_unit(const EvalRecord& r) { return Budget::parse(r.budget).fraction ? "share" : "tokens"; }

std::string fmt(const EvalRecord& r) {
  char b[64];
  std::snprintf(b, sizeof b, in_percent(r) ? "%.1f" : "%.4f", shown(r));
  return b;
}
}  // namespace

std::string records_markdown(const std::vector<EvalRecord>& records) {
  // Group by table, keeping first-seen order of tables, rows and columns.
  std::vector<std::string> tables, budgets;
  std::set<std::string> top_k_tables;  // CA tables' columns are the K each policy selects
  std::map<std::string, std::vector<std::string>> rows;                       // table -> row labels
  std::map<std::string, std::map<std::string, std::map<std::string, std::string>>> cell;  // table, row, budget
  auto add_unique = [](std::vector<std::string>& v, const std::string& s) {
    for (auto& x : v)
      if (x == s) return;
    v.push_back(s);
  };
  for (const auto& r : records) {
    std::string table = r.eval == r.metric ? r.eval : r.eval + " " + r.metric;  // "ca", not "ca ca"
    if (!r.task_type.empty()) table += " (" + r.task_type + ")";
    if (!unit(r).empty()) table += ", " + unit(r);
    const std::string row = r.policy + (r.variant.empty() ? "" : " [" + r.variant + "]");
    add_unique(tables, table);
    if (r.eval == "ca") top_k_tables.insert(table);
    add_unique(rows[table], row);
    add_unique(budgets, r.budget);
    cell[table][row][r.budget] = fmt(r);
  }
  std::ostringstream md;
  for (const auto& t : tables) {  // CA tables' columns are the K each policy selects, the others' the budget
    md << "\n### " << t << "\n\n| policy \\ " << (top_k_tables.count(t) ? "top-K" : "budget") << " |";
    for (auto& b : budgets) md << " " << (top_k_tables.count(t) ? b : Budget::parse(b).describe()) << " |";
    md << "\n|---|";
    for (size_t i = 0; i < budgets.size(); ++i) md << "---|";
    md << "\n";
    for (const auto& row : rows[t]) {
      md << "| " << row << " |";
      for (auto& b : budgets) {
        auto it = cell[t][row].find(b);
        md << " " << (it == cell[t][row].end() ? "" : it->second) << " |";
      }
      md << "\n";
    }
  }
  return md.str();
}

std::string records_json(const std::vector<EvalRecord>& records) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : records) {
    nlohmann::json e = {{"eval", r.eval},           {"policy", r.policy},
                        {"variant", r.variant},     {"budget", budget_value(r)},
                        {"budget_unit", budget_unit(r)}, {"metric", r.metric}, {"value", shown(r)}, {"unit", unit(r)}, {"n", r.n}};
    if (r.eval == "retrieval") e["task_type"] = r.task_type;
    if (r.eval == "ca") e["topk"] = r.topk;
    j.push_back(e);
  }
  return j.dump(1) + "\n";
}

std::vector<EvalRecord> read_records_json(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "records");
  return with_json_errors(path, [&] {
    if (!j.is_array()) fail(path, "not a JSON array of records (as --json writes them)");
    std::vector<EvalRecord> out;
    for (const auto& e : j) {
      EvalRecord r{e.at("eval"), e.at("policy"), e.at("variant"), "", e.at("metric"), e.value("task_type", ""),
                   e.value("topk", 0), e.at("value").get<double>(), e.at("n").get<int64_t>()};
      const double b = e.at("budget").get<double>();
      if (!(b > 0 && b <= 1e12)) fail(path, "a record's budget " + std::to_string(b) + " is not a budget");
      char budget[32];  // a share as a percentage: "1" would read back as one token
      if (e.at("budget_unit") == "share") std::snprintf(budget, sizeof budget, "%g%%", 100 * b);
      else std::snprintf(budget, sizeof budget, "%lld", (long long)b);
      r.budget = budget;
      try {
        Budget::parse(r.budget);
      } catch (const Error& err) {
        fail(path, err.what());
      }
      if (in_percent(r)) r.value /= 100;
      out.push_back(std::move(r));
    }
    return out;
  });
}

void write_records_json(const std::vector<EvalRecord>& records, const std::string& path) {
  std::ofstream out(path);
  out << records_json(records);
  if (!out) fail(path, "cannot write");
}

void write_records_csv(const std::vector<EvalRecord>& records, const std::string& path) {
  std::ofstream out(path);
  out << "eval,policy,variant,budget,budget_unit,metric,task_type,topk,value,unit,n\n";
  for (const auto& r : records)
    out << r.eval << "," << r.policy << ",\"" << r.variant << "\"," << budget_value(r).dump() << "," << budget_unit(r) << ","
        << r.metric << ","
        << r.task_type << "," << r.topk << "," << shown(r) << "," << unit(r) << "," << r.n << "\n";
  if (!out) fail(path, "cannot write");
}

}  // namespace fasa
