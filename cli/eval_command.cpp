// `fasa eval ppl|ca|retrieval|choice|continuation`: quality of every policy against full attention, on the same windows
// and tasks, with the same options for every policy. Markdown on stdout; --json / --csv for scripts.
#include <omp.h>

#include <cstdio>
#include <filesystem>

#include "calib/auto_profile.h"
#include "cli/commands.h"
#include "cli/llama_flags.h"
#include "eval/choice.h"
#include "eval/continuation.h"
#include "eval/decode_eval.h"
#include "draw/plot.h"
#include "eval/retrieval.h"
#include "eval/task_gen.h"
#include "fasa/error.h"

namespace fasa::cli {

namespace {

struct EvalOptions {
  std::string model = FASA_DEFAULT_MODEL;
  std::string text_file;
  std::string tasks_file;
  std::vector<std::string> attn = {kDenseAttn, kFasaAttn};  // without --attn: FASA only where a profile is given
  std::vector<std::string> budgets = {"64"};
  std::vector<int> top_k = {16, 64, 256};
  TextEvalOptions text;
  ContinuationOptions continuation;
  int per_type = 0;
  int min_answer_tokens = 1;
  TaskGenOptions gen;
  bool generate = false;
  bool chat = false;  // retrieval: each prompt a user turn in the model's chat format
  bool no_bos = false;  // retrieval, choice: no BOS before the prompts (as a harness sends token ids)
  std::string json, csv, plot, plot_metric, plot_x, answers;
  std::vector<std::string> plot_inputs;  // eval plot's JSON files
  int threads = 0;
  EngineOptions load;  // the mapping flags'
  PolicyOptions policy;
  SettingLists lists;  // list flags (--fcs 4,8,16): every policy of --attn crossed with their values
};

// --plot-metric, else the evaluation's headline metric (that of the first record's).
std::string plot_metric(const EvalOptions& o, const std::vector<EvalRecord>& records) {
  if (!o.plot_metric.empty() || records.empty()) return o.plot_metric;
  const std::string& e = records[0].eval;
  return e == "ppl" ? "kld" : e == "ca" ? "ca" : e == "continuation" ? "shared" : "accuracy";
}

int report(const EvalOptions& o, const std::string& title, const std::vector<EvalRecord>& records) {
  std::printf("## %s\n%s", title.c_str(), records_markdown(records).c_str());
  if (!o.json.empty()) write_records_json(records, o.json);
  if (!o.csv.empty()) write_records_csv(records, o.csv);
  if (!o.plot.empty()) write_records_plot(records, plot_metric(o, records), o.plot, o.plot_x);
  return 0;
}

std::string text_title(const EvalOptions& o, const ReferenceRun& ref) {
  int64_t tokens = 0;
  for (auto& w : ref.windows) tokens += (int64_t)w.size();
  return o.text_file + ": " + std::to_string(ref.windows.size()) + " windows, " + std::to_string(tokens) +
         " tokens, every position decoded token by token with the policy (no dense prefix), scored from position " +
         std::to_string(o.text.score_from);
}

void add_common(CLI::App* cmd, EvalOptions& o) {
  add_model_option(cmd, o.model);
  cmd->add_option("--attn", o.attn,
                  "Policies, comma-separated (default: full, and fasa where --profile is given); one may carry settings "
                  "of its own, e.g. fasa:fcs=4:tip_mass=0.9. Settings that shape a policy's choices take lists "
                  "(--fcs 4,8,16): a variant each")
      ->delimiter(',');
  cmd->add_option("--json", o.json, "Also write the records as JSON");
  cmd->add_option("--csv", o.csv, "Also write the records as CSV");
  cmd->add_option("--plot", o.plot, "Also plot a metric against the budget (PNG)");
  cmd->add_option("--plot-metric", o.plot_metric, "Metric to plot (default: kld, ca, accuracy or shared)");
  cmd->add_option("--plot-x", o.plot_x, "Plot against this metric instead of the budget, on a log axis (kv_kib: KV read "
                  "per step, from eval ppl and retrieval)");
  add_threads_option(cmd, o.threads);
  add_policy_options(cmd, o.policy, kOffload, &o.lists);
  add_mapping_options(cmd, o.load);
  add_ignored_llama_options(cmd, kGpuFlags);
}

void add_no_bos_flag(CLI::App* cmd, EvalOptions& o) {
  cmd->add_flag("--no-bos", o.no_bos,
                "No BOS token before each prompt even where the model asks for one: as lm-evaluation-harness sends "
                "token ids to a completions API (to compare with its scores)");
}

void add_text(CLI::App* cmd, EvalOptions& o) {
  add_file_option(cmd, o.text_file, "Text")->required();
  add_ctx_option(cmd, o.text.n_ctx, "Window length (default: the model's training context)", 2);
  cmd->add_option("--windows", o.text.windows, "Windows from the start of the text")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--score-from", o.text.score_from, "First position scored")->capture_default_str();
}

CLI::App* add_ppl(CLI::App* eval, EvalOptions& o) {
  CLI::App* ppl = eval->add_subcommand("ppl", "Perplexity, KL divergence and top-1 agreement vs full attention");
  add_common(ppl, o);
  add_text(ppl, o);
  ppl->add_option("--budget", o.budgets, "Budgets, comma-separated")->delimiter(',')->capture_default_str();
  return ppl;
}

CLI::App* add_ca(CLI::App* eval, EvalOptions& o) {
  CLI::App* ca = eval->add_subcommand("ca", "Share of the exact top-K each policy selects (paper Table 1 layout)");
  add_common(ca, o);
  add_text(ca, o);
  ca->add_option("--topk", o.top_k, "Values of K (each policy selects K tokens)")->delimiter(',')->capture_default_str();
  return ca;
}

// The task generator's options; returns --generate's.
CLI::Option* add_task_generation(CLI::App* ret, EvalOptions& o, CLI::Option* tasks_opt) {
  auto* gen_opt = ret->add_option("--generate", o.gen.kinds,
                                  "Generate RULER-style tasks of these kinds instead: passkey, multikey, multivalue, "
                                  "multineedle, vartrack ('all'), word, uuid, multiquery, cwe, fwe ('every' kind), qa "
                                  "(needs --qa-entries); "
                                  "a task asking several values scores the share of them answered")
                      ->delimiter(',')->excludes(tasks_opt);
  ret->add_option("--length", o.gen.lengths, "Generated tasks: prompt + answer tokens, comma-separated")
      ->delimiter(',')->capture_default_str()->check(CLI::Range((int64_t)64, (int64_t)1 << 24))->needs(gen_opt);
  ret->add_option("--n", o.gen.n, "Generated tasks per kind and length")->capture_default_str()->check(CLI::Range(1, 1 << 20))->needs(gen_opt);
  ret->add_option("--seed", o.gen.seed, "Generated tasks: random seed")->capture_default_str()->needs(gen_opt);
  auto* hay_opt = ret->add_option("--haystack", o.gen.haystack_file,
                                  "Generated tasks: text to hide the needles in (default: noise sentences)")->needs(gen_opt);
  ret->add_option("--qa-entries", o.gen.qa_entries_file,
                  "Generated qa tasks: dictionary entries in GCIDE's format (e.g. ../shared/eval/heldout_gcide.txt), "
                  "one asked by a quote of its definition")->needs(gen_opt);
  ret->add_flag("--distractors", o.gen.distractors,
                "Generated tasks: fill the context with look-alike needles (same template, other keys and values)")
      ->needs(gen_opt)->excludes(hay_opt);
  return gen_opt;
}

CLI::App* add_retrieval(CLI::App* eval, EvalOptions& o) {
  CLI::App* ret = eval->add_subcommand("retrieval", "Greedy answers to retrieval tasks: accuracy per type");
  add_common(ret, o);
  auto* tasks_opt = ret->add_option("--tasks", o.tasks_file, "Tasks (JSON lines)");
  add_task_generation(ret, o, tasks_opt);
  ret->add_option("--budget", o.budgets, "Budgets, comma-separated")->delimiter(',')->capture_default_str();
  ret->add_option("--answers", o.answers,
                  "Also write every task's greedy answer beside the expected one, per policy and budget (JSON lines)");
  ret->add_option("--min-answer-tokens", o.min_answer_tokens,
                  "Only tasks whose answer takes at least this many tokens (2: leave out the one-token answers, "
                  "which the dense prefill decides alike for every policy; after --limit)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  ret->add_flag("--chat", o.chat,
                "Ask each task as a user turn in the model's chat format (an instruct model's way; its template, as "
                "fasa chat renders it), and count the answer wherever it stands in the reply");
  ret->add_option("--limit", o.per_type, "At most this many tasks per type (0: all)")->capture_default_str()->needs(tasks_opt);
  add_no_bos_flag(ret, o);
  return ret;
}

CLI::App* add_choice(CLI::App* eval, EvalOptions& o) {
  CLI::App* choice = eval->add_subcommand(
      "choice", "Multiple-choice items by log-likelihood, as lm-evaluation-harness scores them: accuracy");
  add_common(choice, o);
  choice->add_option("--items", o.tasks_file, "Items (JSON lines: context, choices, gold)")->required();
  choice->add_option("--budget", o.budgets, "Budgets, comma-separated")->delimiter(',')->capture_default_str();
  choice->add_option("--answers", o.answers, "Also write every item's log-likelihoods and choice, per policy and budget (JSON lines)");
  add_no_bos_flag(choice, o);
  return choice;
}

CLI::App* add_continuation(CLI::App* eval, EvalOptions& o) {
  CLI::App* cont = eval->add_subcommand(
      "continuation", "Free generation: greedy continuations of text windows, the leading tokens each policy shares with full attention's");
  add_common(cont, o);
  add_file_option(cont, o.text_file, "Text the prompts are cut from")->required();
  add_ctx_option(cont, o.continuation.prompt_tokens, "Each prompt's length in tokens", 2)->capture_default_str();
  cont->add_option("--prompts", o.continuation.prompts, "Prompts, their starts evenly spread over the text")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  add_n_predict_option(cont, o.continuation.tokens, "Greedy tokens after each prompt", 1);
  cont->add_option("--first", o.continuation.first, "first_equal: the share of prompts whose first this many tokens are full's")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cont->add_option("--budget", o.budgets, "Budgets, comma-separated")->delimiter(',')->capture_default_str();
  return cont;
}

CLI::App* add_plot(CLI::App* eval, EvalOptions& o) {
  CLI::App* plot = eval->add_subcommand("plot", "Plot records that earlier runs wrote with --json, together (PNG)");
  plot->add_option("records", o.plot_inputs, "JSON files from --json")->required()->check(CLI::ExistingFile);
  plot->add_option("--plot,-o", o.plot, "The PNG to write")->required();
  plot->add_option("--plot-metric", o.plot_metric, "Metric to plot (default: kld, ca, accuracy or shared, by the first record)");
  plot->add_option("--plot-x", o.plot_x, "Plot against this metric instead of the budget, on a log axis (kv_kib)");
  return plot;
}

int run_plot(const EvalOptions& o) {
  std::vector<EvalRecord> records;
  for (const std::string& f : o.plot_inputs) {
    std::vector<EvalRecord> more = read_records_json(f);
    if (o.plot_inputs.size() > 1)  // each file's lines apart, named by the file
      for (EvalRecord& r : more) r.variant += (r.variant.empty() ? "" : " ") + std::filesystem::path(f).stem().string();
    records.insert(records.end(), more.begin(), more.end());
  }
  if (records.empty()) throw Error("eval plot: the files hold no records");
  const std::string metric = plot_metric(o, records);
  write_records_plot(records, metric, o.plot, o.plot_x);
  std::printf("wrote %s: %s of %zu records from %zu files\n", o.plot.c_str(), metric.c_str(), records.size(), o.plot_inputs.size());
  return 0;
}

// What every evaluation does before its work: the default policies (with a note), the output files
// writable, the model loaded and every policy x budget checked (a bad option fails before hours of work).
std::unique_ptr<Model> prepare(EvalOptions& o, const CLI::App* sub) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  // Without --attn: full attention, and FASA beside it where a profile was given (it needs one).
  if (sub->count("--attn") == 0 && o.policy.profile.empty() && !o.policy.synthetic_profile) {
    o.attn = {kDenseAttn};
    std::string others;  // the registry's names
    for (const std::string& n : policy_names()) others += (others.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "note: full attention only; add --profile FILE (from fasa calibrate) or --profile auto for fasa, or --attn "
                         "with other policies (%s)\n", others.c_str());
  }
  for (const std::string& out : {o.json, o.csv, o.plot, o.answers})  // before the work, not after it
    if (!out.empty()) check_writable(out);
  auto model = load_model(o.model, {.mmap = o.load.mmap, .mlock = o.load.mlock});
  o.attn = cross_settings(o.attn, o.lists);
  AutoProfileStore autos(*model);  // the model's cached automatic profile, if any
  for (const PolicyRun& run : policy_runs(*model, o.attn, o.policy)) {
    PolicyOptions po = run.options;
    for (auto& b : o.budgets) {
      po.budget = Budget::parse(b);
      check_policy(po, *model, &autos);
    }
  }
  return model;
}

int run_retrieval(EvalOptions& o, const Model& model, bool generated) {
  std::string source = o.tasks_file;
  std::vector<RetrievalTask> tasks;
  if (generated) {
    o.gen.kinds = expand_task_kinds(o.gen.kinds);
    tasks = generate_retrieval_tasks(model.tokenizer, o.gen);
    source = "generated (seed " + std::to_string(o.gen.seed) + ", haystack " +
             (o.gen.distractors ? std::string("look-alike needles")
              : o.gen.haystack_file.empty() ? std::string("noise") : o.gen.haystack_file) + ")";
  } else if (!o.tasks_file.empty()) {
    tasks = load_retrieval_tasks(o.tasks_file, o.per_type);
  } else {
    throw Error("eval retrieval: give --tasks FILE or --generate KINDS");
  }
  if (o.min_answer_tokens > 1) {
    const size_t all = tasks.size();
    tasks = tasks_with_answers_of_at_least(model, std::move(tasks), o.min_answer_tokens);
    source += ", answers of " + std::to_string(o.min_answer_tokens) + "+ tokens (" + std::to_string(tasks.size()) +
              " of " + std::to_string(all) + ")";
  }
  for (RetrievalTask& t : tasks) t.bos = !o.no_bos;
  if (o.chat) {
    tasks = in_chat_format(model, std::move(tasks));
    source += ", asked in the model's chat format";
  }
  std::vector<RetrievalAnswer> answers;
  auto records = eval_retrieval(model, tasks, o.attn, o.budgets, o.policy, o.answers.empty() ? nullptr : &answers);
  if (!o.answers.empty()) write_retrieval_answers(answers, o.answers);
  return report(o, source + ": " + std::to_string(tasks.size()) + " tasks, greedy", records);
}

int run_choice(const EvalOptions& o, const Model& model, const std::vector<ChoiceItem>& items) {
  std::vector<ChoiceAnswer> answers;
  auto records = eval_choice(model, items, o.attn, o.budgets, o.policy, !o.no_bos, o.answers.empty() ? nullptr : &answers);
  if (!o.answers.empty()) write_choice_answers(answers, o.answers);
  return report(o, o.tasks_file + ": " + std::to_string(items.size()) + " items, every token decoded with the policy" +
                       (o.no_bos ? ", no BOS" : ""), records);
}

int run_continuation(const EvalOptions& o, const Model& model) {
  const ContinuationOptions& c = o.continuation;
  const auto prompts = continuation_prompts(model, read_text_file(o.text_file), c);
  return report(o, o.text_file + ": " + std::to_string(prompts.size()) + " prompts of " + std::to_string(c.prompt_tokens) +
                       " tokens, " + std::to_string(c.tokens) + " greedy tokens each",
                eval_continuation(model, prompts, o.attn, o.budgets, o.policy, c));
}

// ppl, or ca (shadow selection on the dense trajectory).
int run_text(const EvalOptions& o, const Model& model, bool ppl) {
  const ReferenceRun ref = reference_run(model, read_text_file(o.text_file), o.text);
  if (ppl) return report(o, text_title(o, ref), eval_perplexity(model, ref, o.attn, o.budgets, o.policy, o.text));
  return report(o, text_title(o, ref) + "; dense trajectory, policies choose in shadow",
                eval_selection_agreement(model, ref, o.attn, o.top_k, o.policy, o.text));
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* eval = app.add_subcommand("eval", "Quality of every policy against full attention");
  eval->require_subcommand(1);
  CLI::App* ppl = add_ppl(eval, *o);
  CLI::App* ca = add_ca(eval, *o);
  CLI::App* ret = add_retrieval(eval, *o);
  CLI::App* choice = add_choice(eval, *o);
  CLI::App* cont = add_continuation(eval, *o);
  CLI::App* plot = add_plot(eval, *o);
  auto run = [o, ppl, ca, ret, choice, cont, plot]() -> int {
    if (plot->parsed()) return run_plot(*o);
    const CLI::App* sub = ret->parsed() ? ret : ppl->parsed() ? ppl : cont->parsed() ? cont : choice->parsed() ? choice : ca;
    std::vector<ChoiceItem> items;  // a malformed file is reported before the model loads
    if (choice->parsed()) items = load_choice_items(o->tasks_file);
    const auto model = prepare(*o, sub);
    if (ret->parsed()) return run_retrieval(*o, *model, ret->count("--generate") > 0);
    if (choice->parsed()) return run_choice(*o, *model, items);
    if (cont->parsed()) return run_continuation(*o, *model);
    return run_text(*o, *model, ppl->parsed());
  };
  return {eval, run};
}

}  // namespace fasa::cli
