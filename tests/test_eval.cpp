// The evaluation harness: sanity relations that must hold whatever the model (full vs itself, the
// oracle's agreement with the exact top-K), task-file validation, and the report formats.
#include <cairo.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <nlohmann/json.hpp>

#include "eval/choice.h"
#include "eval/continuation.h"
#include "eval/decode_eval.h"
#include "eval/policy_runs.h"
#include "draw/figure.h"
#include "draw/heatmap.h"
#include "draw/plot.h"
#include "eval/retrieval.h"
#include "model/chat_template.h"
#include "eval/task_gen.h"
#include "model/session.h"
#include "sparse/policy.h"
#include "test_util.h"
#include "fasa/error.h"

namespace fasa {
namespace {

const std::string kText =
    "And God said, Let the waters under the heaven be gathered together unto one place, and let the dry land "
    "appear: and it was so. And God called the dry land Earth; and the gathering together of the waters called "
    "he Seas: and God saw that it was good.";

double value(const std::vector<EvalRecord>& r, const std::string& policy, const std::string& metric,
             const std::string& budget) {
  for (auto& x : r)
    if (x.policy == policy && x.metric == metric && x.budget == budget) return x.value;
  ADD_FAILURE() << "no record " << policy << " " << metric << " " << budget;
  return NAN;
}

TEST(EvalPpl, FullMatchesItselfAndRandomIsWorseThanOracle) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  TextEvalOptions o;
  o.windows = 1;
  const ReferenceRun ref = reference_run(*m, kText, o);
  PolicyOptions base;
  base.dense_layers = {};
  auto r = eval_perplexity(*m, ref, {"full", "oracle", "random"}, {"8", "16"}, base, o);
  EXPECT_NEAR(value(r, "full", "kld", "8"), 0.0, 1e-6);
  EXPECT_NEAR(value(r, "full", "top1", "16"), 1.0, 1e-12);
  EXPECT_NEAR(value(r, "full", "ppl", "8"), std::exp(value(r, "full", "nll", "8")), 1e-9);
  EXPECT_LT(value(r, "oracle", "kld", "8"), value(r, "random", "kld", "8"));
  EXPECT_GT(value(r, "random", "kld", "8"), 0.01);
  EXPECT_LE(value(r, "oracle", "kld", "16"), value(r, "oracle", "kld", "8") + 1e-3);
  // KV read per step: full's whatever the budget, a selection's grows with its budget and stays below full's
  EXPECT_GT(value(r, "full", "kv_kib", "8"), 0.0);
  EXPECT_EQ(value(r, "full", "kv_kib", "8"), value(r, "full", "kv_kib", "16"));
  EXPECT_LT(value(r, "random", "kv_kib", "8"), value(r, "random", "kv_kib", "16"));
  EXPECT_LT(value(r, "random", "kv_kib", "16"), value(r, "full", "kv_kib", "16"));
  for (auto& x : r) EXPECT_EQ(x.n, (int64_t)ref.windows[0].size() - 1);
}

// A policy registered at run time (as Python's fasa.register_policy does) runs by name in an
// evaluation: here one that makes StreamingLLM under another name scores exactly as stream does. A
// built-in name, a name outside the specs' syntax and a row without a factory are refused.
TEST(EvalPpl, ARegisteredPolicyRunsByName) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  register_policy({"test-stream", "StreamingLLM by another name", false, false,
                   [](const PolicyOptions& o, const Model& model, AutoProfileStore* autos) {
                     PolicyOptions stream = o;
                     stream.attn = "stream";
                     return make_policy(stream, model, autos);
                   }});
  EXPECT_EQ(policy_info("test-stream").description, "StreamingLLM by another name");
  TextEvalOptions o;
  o.windows = 1;
  const ReferenceRun ref = reference_run(*m, kText, o);
  auto r = eval_perplexity(*m, ref, {"stream", "test-stream"}, {"16"}, PolicyOptions{}, o);
  EXPECT_GT(value(r, "stream", "kld", "16"), 1e-4);  // sparse: a difference to carry
  EXPECT_EQ(value(r, "test-stream", "kld", "16"), value(r, "stream", "kld", "16"));
  EXPECT_EQ(value(r, "test-stream", "nll", "16"), value(r, "stream", "nll", "16"));

  PolicyInfo row = policy_info("test-stream");
  row.name = "stream";
  EXPECT_THROW(register_policy(row), Error);
  row.name = "a:b";
  EXPECT_THROW(register_policy(row), Error);
  row.name = "test-none";
  row.make = nullptr;
  EXPECT_THROW(register_policy(row), Error);
  EXPECT_THROW(policy_info("test-none"), Error);
}

TEST(EvalCa, OracleAgreesFullyRandomDoesNot) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  TextEvalOptions o;
  o.windows = 1;
  const ReferenceRun ref = reference_run(*m, kText, o);
  PolicyOptions base;
  auto r = eval_selection_agreement(*m, ref, {"full", "oracle", "random", "stream"}, {8}, base, o);
  ASSERT_EQ(r.size(), 3u);  // full selects everything and is not listed
  EXPECT_NEAR(r[0].value, 1.0, 1e-12);
  EXPECT_GT(r[0].n, 0);
  EXPECT_LT(r[1].value, 0.6);
  EXPECT_EQ(r[1].topk, 8);
}

// Policies whose sessions are alike share one dense decode (eval ca); each record must be what a run of
// its policy and K alone gives, in the order asked. Two FASA variants want other key layouts than the
// baselines' and than each other's, so the run has three groups, each with two K, over two windows.
TEST(EvalCa, SharedDecodeEqualsOneRunPerPolicyAndK) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  TextEvalOptions o;
  o.windows = 2;
  o.n_ctx = 40;
  const ReferenceRun ref = reference_run(*m, kText, o);
  ASSERT_EQ(ref.windows.size(), 2u);
  PolicyOptions base;
  base.synthetic_profile = true;
  const std::vector<std::string> specs = {"fasa:fcs=4", "oracle", "random", "fasa:fcs=8", "stream", "snapkv", "h2o"};
  const std::vector<int> ks = {8, 24};
  const std::vector<EvalRecord> together = eval_selection_agreement(*m, ref, specs, ks, base, o);
  ASSERT_EQ(together.size(), specs.size() * ks.size());
  size_t i = 0;
  for (const std::string& spec : specs)
    for (int k : ks) {
      const std::vector<EvalRecord> alone = eval_selection_agreement(*m, ref, {spec}, {k}, base, o);
      ASSERT_EQ(alone.size(), 1u);
      SCOPED_TRACE(spec + " at K=" + std::to_string(k));
      EXPECT_EQ(together[i].policy, alone[0].policy);
      EXPECT_EQ(together[i].variant, alone[0].variant);
      EXPECT_EQ(together[i].topk, k);
      EXPECT_EQ(together[i].n, alone[0].n);
      EXPECT_GT(alone[0].n, 0);
      EXPECT_DOUBLE_EQ(together[i].value, alone[0].value);
      ++i;
    }
  EXPECT_THROW(eval_selection_agreement(*m, ref, {"stream"}, {0}, base, o), Error);
}

// What an evaluation runs: specs carry settings of their own, list flags cross every spec whose policy
// takes them with their values, and a setting a policy does not take is an error in its spec.
TEST(EvalPolicyRuns, SpecsListsAndOneRunPerVariant) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  PolicyOptions base;
  base.synthetic_profile = true;
  const std::vector<std::string> specs = cross_settings({"full", "fasa", "stream:sink=2"}, {{"fcs", {"4", "8"}}});
  EXPECT_EQ(specs, (std::vector<std::string>{"full", "fasa:fcs=4", "fasa:fcs=8", "stream:sink=2"}));
  const std::vector<PolicyRun> runs = policy_runs(*m, specs, base);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].name, "full");
  EXPECT_EQ(runs[1].options.fcs, 4);
  EXPECT_EQ(runs[1].variant, "fcs=4 sharing=group dense=0");
  EXPECT_EQ(runs[2].options.fcs, 8);
  EXPECT_EQ(runs[3].name, "stream");
  EXPECT_EQ(runs[3].options.sink, 2);
  EXPECT_EQ(runs[3].options.attn, "stream");
  EXPECT_EQ(policy_runs(*m, {"full:kv_type=q8_0"}, base)[0].variant, "kv=q8_0");  // the cache shows too
  // Settings outside the lists keep runs apart even where the variant does not name them.
  const auto apart = policy_runs(*m, {"fasa", "fasa:tip_int8=true", "random:seed_policy=1", "random:seed_policy=2"}, base);
  ASSERT_EQ(apart.size(), 4u);
  // ... and their labels name what differs, so that each is a row of its own (two profiles alike)
  EXPECT_EQ(apart[2].variant, "dense=0 seed_policy=1");
  EXPECT_EQ(apart[3].variant, "dense=0 seed_policy=2");
  EXPECT_EQ(apart[0].variant, "fcs=8 sharing=group dense=0");
  EXPECT_EQ(cross_settings({"fasa:fcs=16"}, {{"fcs", {"4", "8"}}}), std::vector<std::string>{"fasa:fcs=16"});
  // The chunk ranking: a FASA variant of its own, nothing to Quest.
  const auto ranked = policy_runs(*m, cross_settings({"fasa", "quest"}, {{"fc_rank", {"agreement", "magnitude"}}}), base);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[1].variant, "rank=magnitude fcs=8 sharing=group dense=0");
  EXPECT_EQ(ranked[1].options.fc_rank, FcRank::Magnitude);
  // A policy takes the settings its row names, and those no row takes (the cache's): quest reads no chunk setting.
  EXPECT_EQ(test::error_message([&] { policy_runs(*m, {"quest:fc_rank=agreement"}, base); }),
            "attn 'quest:fc_rank=agreement': quest does not take fc_rank (its own settings: none)");
  EXPECT_EQ(test::error_message([&] { policy_runs(*m, {"stream:fcs=4"}, base); }),
            "attn 'stream:fcs=4': stream does not take fcs (its own settings: sink)");
  EXPECT_EQ(policy_runs(*m, {"quest:kv_type=q8_0"}, base)[0].variant, "dense=0 kv=q8_0");
  EXPECT_EQ(test::error_message([&] { policy_runs(*m, {"fasa:budget=8"}, base); }),
            "attn 'fasa:budget=8': give the budget as its own flag, not in a policy's settings");
  EXPECT_TRUE(is_list_setting("fcs"));
  EXPECT_FALSE(is_list_setting("dense_layers"));  // a list already
  EXPECT_EQ(test::error_message([&] { policy_runs(*m, {"fasa:fcs"}, base); }),
            "attn 'fasa:fcs': 'fcs' is not SETTING=VALUE (e.g. fasa:fcs=4)");
  EXPECT_NE(test::error_message([&] { policy_runs(*m, {"fasa:fcs=many"}, base); }).find("fcs"), std::string::npos);
  EXPECT_NE(test::error_message([&] { policy_runs(*m, {"nope"}, base); }).find("unknown attention policy 'nope'"),
            std::string::npos);
}

// --min-answer-tokens: a one-token answer (here " the") is left out at 2, also after a prompt that ends
// in a space, and a five-word one kept; nothing left, or a count under 1, is an error.
TEST(EvalRetrieval, TasksWithAnswersOfAtLeastNTokens) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  std::vector<RetrievalTask> tasks(3);
  tasks[0].prompt = "Ge1:1 In the beginning God created", tasks[0].answer = "the";
  tasks[1].prompt = "Ge1:1 In the beginning God created", tasks[1].answer = "the heaven and the earth";
  tasks[2].prompt = "Ge1:1 In the beginning God created ", tasks[2].answer = "the";
  const auto tokens = [&](const std::string& text) { return m->tokenizer.encode(text, true).size(); };
  ASSERT_EQ(tokens(tasks[0].prompt + " the"), tokens(tasks[0].prompt) + 1);  // " the" is one token
  EXPECT_EQ(tasks_with_answers_of_at_least(*m, tasks, 1).size(), 3u);
  const auto kept = tasks_with_answers_of_at_least(*m, tasks, 2);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].answer, "the heaven and the earth");
  EXPECT_EQ(test::error_message([&] { tasks_with_answers_of_at_least(*m, tasks, 100); }),
            "no task's answer takes 100 tokens or more");
  EXPECT_NE(test::error_message([&] { tasks_with_answers_of_at_least(*m, tasks, 0); }).find("at least 1"), std::string::npos);
}

TEST(EvalRetrieval, TaskFileValidationAndLimits) {
  const std::string dir = test::temp_dir();
  test::write_file(dir + "/bad.jsonl", "{\"type\":\"a\",\"prompt\":\"x\",\"answer\":\"y\"}\n{not json\n");
  test::write_file(dir + "/missing.jsonl", "{\"type\":\"a\",\"prompt\":\"x\"}\n");
  test::write_file(dir + "/ok.jsonl", "{\"type\":\"a\",\"prompt\":\"Ge1:1 In the\",\"answer\":\"beginning\"}\n"
                                      "{\"type\":\"a\",\"prompt\":\"x\",\"answer\":\"y\"}\n"
                                      "{\"type\":\"b\",\"prompt\":\"And God said, Let there be\",\"answer\":\"light\"}\n");
  for (auto [file, expect] : {std::pair<std::string, std::string>{"bad.jsonl", "line 2: not valid JSON"},
                              {"missing.jsonl", "line 1: missing string field 'answer'"}}) {
    try {
      load_retrieval_tasks(dir + "/" + file);
      ADD_FAILURE() << file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
  auto tasks = load_retrieval_tasks(dir + "/ok.jsonl", 1);
  ASSERT_EQ(tasks.size(), 2u);
  auto m = load_model(FASA_BUNDLED_MODEL);
  auto r = eval_retrieval(*m, tasks, {"full"}, {"64", "8"}, PolicyOptions{});
  ASSERT_EQ(r.size(), 8u);  // a, b, all at each budget; then KV read per decoded token at each
  EXPECT_EQ(r[2].task_type, "all");
  EXPECT_EQ(r[2].n, 2);
  // full attention reads every cached row at every step, whatever the budget: the same bytes per token
  EXPECT_EQ(r[6].metric, "kv_kib");
  EXPECT_GT(r[6].value, 0);
  EXPECT_EQ(r[6].value, r[7].value);
  EXPECT_NEAR(r[2].value, (r[0].value + r[1].value) / 2, 1e-12);
}

// Generated tasks: every kind fits its length and fills most of it, the answer's values sit in the
// prompt, a seed reproduces a task, and bad kinds, lengths or haystacks are clear errors.
TEST(EvalRetrieval, GeneratedTasksFitTheirLengthAndHoldTheirAnswers) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const std::string dir = test::temp_dir();
  std::string hay_text = kText;  // one clause a line: lines short enough to fill a length closely
  for (size_t at; (at = hay_text.find(", ")) != std::string::npos;) hay_text.replace(at, 2, ",\n");
  test::write_file(dir + "/hay.txt", hay_text + "\n");
  TaskGenOptions o;
  o.lengths = {300, 1024};
  o.n = 3;
  for (const std::string& hay : {std::string(), dir + "/hay.txt"}) {
    o.haystack_file = hay;
    const auto tasks = generate_retrieval_tasks(m->tokenizer, o);
    ASSERT_EQ(tasks.size(), 2u * 5u * 3u);
    for (const auto& t : tasks) {
      const int64_t length = std::stoll(t.type.substr(t.type.find('@') + 1));
      const int64_t n = (int64_t)m->tokenizer.encode(t.prompt, true).size();
      const int64_t answer = (int64_t)m->tokenizer.encode(" " + t.answer, false).size();
      EXPECT_LE(n + answer, length) << t.id;
      EXPECT_GE(n, length * 8 / 10) << t.id;
      // The needle that answers: the question's last clause followed by the answer's first part, or for
      // multivalue every value after the asked name.
      const std::string clause = t.prompt.substr(t.prompt.rfind("? ") + 2);
      if (t.type.rfind("multivalue", 0) == 0) {
        const std::string name = clause.substr(15, clause.size() - 15 - 4);  // "The numbers of NAME are"
        ASSERT_EQ(t.values.size(), 3u) << t.id;
        EXPECT_EQ(t.answer, t.values[0] + ", " + t.values[1] + ", " + t.values[2]) << t.id;
        for (const auto& v : t.values)
          EXPECT_NE(t.prompt.find("One number of " + name + " is " + v + ".\n"), std::string::npos) << t.id;
      } else {
        EXPECT_TRUE(t.values.empty()) << t.id;
        const std::string first = t.answer.substr(0, t.answer.find(" = "));
        EXPECT_NE(t.prompt.find(clause + " " + first), std::string::npos) << t.id << ": " << t.answer;
      }
      if (!hay.empty()) {
        EXPECT_NE(t.prompt.find("dry land"), std::string::npos) << t.id;
      }
    }
  }
  test::write_file(dir + "/empty.txt", "\r\n\n");
  o.haystack_file.clear();
  const auto a = generate_retrieval_tasks(m->tokenizer, o), b = generate_retrieval_tasks(m->tokenizer, o);
  // Records per kind and length, per length, and overall.
  const std::vector<RetrievalTask> two = {a[0], a.back()};
  std::vector<std::string> types;
  for (const auto& r : eval_retrieval(*m, two, {"full"}, {"64"}, PolicyOptions{})) types.push_back(r.task_type);
  EXPECT_EQ(types, (std::vector<std::string>{"passkey@300", "all@300", "vartrack@1024", "all@1024", "all",
                                             "all"}));  // the last: kv_kib
  // StreamingLLM at 64 of ~1000 tokens reads far less per decoded token than full attention, even with
  // layer 0 dense (a quarter of the layers): the records come last, in the policies' order.
  const auto read = eval_retrieval(*m, {a.back()}, {"full", "stream"}, {"64"}, PolicyOptions{});
  ASSERT_EQ(read.end()[-1].metric, "kv_kib");
  EXPECT_EQ(read.end()[-1].policy, "stream");
  EXPECT_LT(read.end()[-1].value, read.end()[-2].value / 2);
  // A multivalue task adds the share answered whole and in order, after the accuracy records.
  ASSERT_EQ(a[6].type, "multivalue@300");
  std::vector<std::string> metrics;
  const auto mv = eval_retrieval(*m, {a[6]}, {"full"}, {"64"}, PolicyOptions{});
  for (const auto& r : mv) metrics.push_back(r.metric + " " + r.task_type);
  ASSERT_EQ(mv.size(), 7u);
  EXPECT_NEAR(mv[0].value * 3, std::round(mv[0].value * 3), 1e-9);  // a share of the three values
  EXPECT_GE(mv[0].value, mv[3].value);                                // whole and in order counts in full
  EXPECT_EQ(metrics, (std::vector<std::string>{"accuracy multivalue@300", "accuracy all@300", "accuracy all",
                                               "exact multivalue@300", "exact all@300", "exact all", "kv_kib all"}));
  EXPECT_EQ(a[7].prompt, b[7].prompt);
  o.seed = 1;
  EXPECT_NE(generate_retrieval_tasks(m->tokenizer, o)[7].prompt, a[7].prompt);
  for (auto [kinds, length, hay, expect] :
       {std::tuple<std::string, int64_t, std::string, std::string>{"nope", 1024, "", "unknown task kind 'nope'"},
        {"vartrack", 40, "", "too short for a vartrack task"},
        {"passkey", 1024, dir + "/absent.txt", "absent.txt: haystack is not a readable file"},
        {"passkey", 1024, dir, "haystack is not a readable file"},
        {"passkey", 1024, dir + "/empty.txt", "empty.txt: haystack has no text"}}) {
    TaskGenOptions bad;
    bad.kinds = {kinds};
    bad.lengths = {length};
    bad.haystack_file = hay;
    try {
      generate_retrieval_tasks(m->tokenizer, bad);
      ADD_FAILURE() << expect;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  }
}

// RULER's other kinds and the look-alike haystack: each task fits its length; a keyed needle is in the
// prompt once, among look-alikes of its template (no noise left); several values are the answer in
// order; cwe's and fwe's answers are the list's most frequent words, counted here again.
TEST(EvalRetrieval, EveryKindWithAndWithoutLookAlikeNeedles) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  TaskGenOptions o;
  o.kinds = expand_task_kinds({"every"});
  ASSERT_EQ(o.kinds, every_task_kind());
  // The lists' order is the tasks' (a seed's tasks stay the same): "all" first, then RULER's others.
  ASSERT_EQ(o.kinds, (std::vector<std::string>{"passkey", "multikey", "multivalue", "multineedle", "vartrack", "word",
                                               "uuid", "multiquery", "cwe", "fwe"}));
  ASSERT_EQ(expand_task_kinds({"all"}), std::vector<std::string>(o.kinds.begin(), o.kinds.begin() + 5));
  o.lengths = {400, 1024};
  o.n = 2;
  for (bool distractors : {false, true}) {
    o.distractors = distractors;
    const auto tasks = generate_retrieval_tasks(m->tokenizer, o);
    ASSERT_EQ(tasks.size(), 2u * 10u * 2u);
    for (const auto& t : tasks) {
      const std::string kind = t.type.substr(0, t.type.find('@'));
      const int64_t length = std::stoll(t.type.substr(t.type.find('@') + 1));
      const int64_t n = (int64_t)m->tokenizer.encode(t.prompt, true).size();
      EXPECT_LE(n + (int64_t)m->tokenizer.encode(" " + t.answer, false).size(), length) << t.id;
      EXPECT_GE(n, length * 8 / 10) << t.id;
      const bool list = kind == "cwe" || kind == "fwe";
      EXPECT_EQ(t.prompt.find("The grass is green") == std::string::npos, distractors || list) << t.id;
      EXPECT_EQ(t.natural_context, !distractors && !list) << t.id;  // (no automatic profile from it)
      if (!t.values.empty()) {
        std::string joined;
        for (const auto& v : t.values) joined += (joined.empty() ? "" : ", ") + v;
        EXPECT_EQ(t.answer, joined) << t.id;
      }
      if (list) {
        std::map<std::string, int> count;
        const size_t from = t.prompt.find('\n') + 1, to = t.prompt.rfind('\n');
        std::istringstream words(t.prompt.substr(from, to - from));
        for (std::string w; words >> w;) ++count[w];
        ASSERT_EQ(t.values.size(), kind == "cwe" ? 10u : 3u) << t.id;
        int least_asked = 1 << 30, most_other = 0;
        for (const auto& [w, c] : count) {
          if (std::find(t.values.begin(), t.values.end(), w) != t.values.end()) least_asked = std::min(least_asked, c);
          else most_other = std::max(most_other, c);
        }
        EXPECT_GT(least_asked, most_other) << t.id;
        continue;
      }
      // The asked needle: the question's last clause followed by the answer; the clause itself only there
      // and in the question (no look-alike reuses the asked name or key).
      const std::string clause = t.prompt.substr(t.prompt.rfind("? ") + 2);
      auto count = [&](const std::string& what) {
        size_t n = 0;
        for (size_t at = 0; (at = t.prompt.find(what, at)) != std::string::npos; ++at) ++n;
        return n;
      };
      if (kind == "word" || kind == "uuid" || kind == "multikey" || kind == "multineedle") {
        EXPECT_EQ(count(clause + " " + t.answer + ".\n"), 1u) << t.id;
        EXPECT_EQ(count(clause), 2u) << t.id;
      }
      if (kind == "multiquery") {
        for (const auto& v : t.values) EXPECT_NE(t.prompt.find(": " + v + ".\n"), std::string::npos) << t.id;
      }
      // Lines of the needles' template beyond the needles: look-alikes fill the context, or none at all.
      const std::map<std::string, std::pair<std::string, size_t>> stem = {  // kind: line start, needles
          {"passkey", {"The number ", 0}},         {"multikey", {"Record ", 6}},     {"multiquery", {"Record ", 8}},
          {"multivalue", {"One number of ", 5}},  {"multineedle", {"The favourite number of ", 4}},
          {"word", {"The magic word of ", 1}},     {"uuid", {"The code of ", 1}},   {"vartrack", {"VAR ", 5}}};
      const auto& [start, needles] = stem.at(kind);
      if (distractors) {
        EXPECT_GE(count("\n" + start), needles + 5) << t.id;
      } else {
        EXPECT_LE(count("\n" + start), needles) << t.id;
      }
    }
  }
  TaskGenOptions both;
  both.distractors = true;
  both.haystack_file = "hay.txt";
  EXPECT_NE(test::error_message([&] { generate_retrieval_tasks(m->tokenizer, both); }).find("--distractors"),
            std::string::npos);
  TaskGenOptions tiny;
  tiny.kinds = {"cwe"};
  tiny.lengths = {100};
  EXPECT_NE(test::error_message([&] { generate_retrieval_tasks(m->tokenizer, tiny); }).find("too short for a cwe task"),
            std::string::npos);
  // No automatic profile is made from look-alike needles (it would be kept and cached for the model).
  setenv("XDG_CACHE_HOME", test::temp_dir().c_str(), 1);
  TaskGenOptions look;
  look.kinds = {"passkey"};
  look.lengths = {1200};
  look.n = 1;
  look.distractors = true;
  PolicyOptions fasa;
  fasa.profile = "auto";
  EXPECT_NE(test::error_message([&] {
              eval_retrieval(*m, generate_retrieval_tasks(m->tokenizer, look), {"fasa"}, {"64"}, fasa);
            }).find("look-alike needles"),
            std::string::npos);
}

// qa: dictionary entries fill the context, the asked one among them once; the question quotes its
// definition (not an etymology line, even a capitalised one inside its brackets) and the answer is its
// headword; cross-references and entries sharing a quote are never asked; a missing, entry-less or too
// small dictionary is a clear error.
TEST(EvalRetrieval, QaAsksOneDictionaryEntryByItsDefinition) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const std::string dir = test::temp_dir();
  {
    std::ofstream f(dir + "/dict.txt");
    f << "Licence text, not an entry.\n\n";
    for (int i = 0; i < 40; ++i)
      f << "Word" << i << " \\Word" << i << "\\ (w[^o]rd), n. [Etym: from old word" << i << ",\n   Icel. ord" << i
        << ".]\n   The meaning number " << i << " of this word, in many words.\n   [1913 Webster]\n\n";
    f << "Wordsee \\Wordsee\\, n.\n   See {Word1}.\n\n";
    f << "Twin1 \\Twin1\\, n.\n   Same meaning twice here.\n\nTwin2 \\Twin2\\, n.\n   Same meaning twice here.\n\n";
  }
  TaskGenOptions o;
  o.kinds = {"qa"};
  o.lengths = {600, 1500};
  o.n = 30;
  o.qa_entries_file = dir + "/dict.txt";
  const auto tasks = generate_retrieval_tasks(m->tokenizer, o);
  ASSERT_EQ(tasks.size(), 60u);
  for (const auto& t : tasks) {
    const int64_t length = std::stoll(t.type.substr(t.type.find('@') + 1));
    const int64_t n = (int64_t)m->tokenizer.encode(t.prompt, true).size();
    EXPECT_LE(n + (int64_t)m->tokenizer.encode(" " + t.answer, false).size(), length) << t.id;
    EXPECT_GE(n, length * 6 / 10) << t.id;
    ASSERT_EQ(t.answer.rfind("Word", 0), 0u) << t.id;
    const std::string number = t.answer.substr(4);
    const std::string entry = t.answer + " \\" + t.answer + "\\";
    EXPECT_EQ(t.prompt.find(entry), t.prompt.rfind(entry)) << t.id;  // once
    EXPECT_NE(t.prompt.find(entry), std::string::npos) << t.id;
    EXPECT_NE(t.prompt.find("define as \"The meaning number " + number + " of this word, in\"? The word is"),
              std::string::npos) << t.id;
    EXPECT_EQ(t.prompt.find("Licence"), std::string::npos) << t.id;
    EXPECT_TRUE(t.natural_context) << t.id;  // dictionary text: an automatic profile may be measured on it
  }
  TaskGenOptions longer = o;
  longer.lengths = {8000};  // ~45 tokens an entry, 41 entries
  EXPECT_NE(test::error_message([&] { generate_retrieval_tasks(m->tokenizer, longer); }).find("dict.txt: too few dictionary entries"),
            std::string::npos);
  TaskGenOptions none = o;
  none.qa_entries_file.clear();
  EXPECT_NE(test::error_message([&] { generate_retrieval_tasks(m->tokenizer, none); }).find("needs --qa-entries"),
            std::string::npos);
  { std::ofstream(dir + "/prose.txt") << "Just prose.\n\nNo entries here.\n"; }
  none.qa_entries_file = dir + "/prose.txt";
  EXPECT_NE(test::error_message([&] { generate_retrieval_tasks(m->tokenizer, none); }).find("prose.txt: qa dictionary has fewer"),
            std::string::npos);
  const std::string held_out = test::shared_dir() + "/eval/heldout_gcide.txt";
  if (test::shared_dir().empty() || !std::filesystem::exists(held_out)) GTEST_SKIP() << "no " << held_out;
  o.qa_entries_file = held_out;  // GCIDE's own W-Z entries parse too
  o.lengths = {2048};
  const auto gcide = generate_retrieval_tasks(m->tokenizer, o);
  std::printf("a held-out qa task ends: ...%s [%s]\n", gcide[0].prompt.substr(gcide[0].prompt.size() - 300).c_str(),
              gcide[0].answer.c_str());
  for (const auto& t : gcide) {
    EXPECT_TRUE(std::tolower((unsigned char)t.answer[0]) >= 'w') << t.answer;
    EXPECT_NE(t.prompt.find("\n" + t.answer + " \\"), std::string::npos) << t.id;
  }
}

// A single answer must begin the text; several values score the share found anywhere (RULER's
// string_match_all), while "exact" still asks for all of them in order.
TEST(EvalRetrieval, ScoresAnAnswerOrTheShareOfItsValues) {
  const RetrievalTask key{"1", "passkey", "", "12345", {}};
  EXPECT_EQ(answer_score(key, "\n 12345."), 1);
  EXPECT_EQ(answer_score(key, " The pass key is 12345."), 0);
  EXPECT_EQ(answer_score(key, " 1234"), 0);
  const RetrievalTask many{"2", "multivalue", "", "1234, 5678, 9012", {"1234", "5678", "9012"}};
  EXPECT_EQ(answer_score(many, " 1234, 5678, 9012."), 1);
  EXPECT_TRUE(answer_exact(many, " 1234, 5678, 9012."));
  EXPECT_DOUBLE_EQ(answer_score(many, " 9012, 1234."), 2.0 / 3);
  EXPECT_FALSE(answer_exact(many, " 9012, 1234."));
  EXPECT_DOUBLE_EQ(answer_score(many, " 5678."), 1.0 / 3);
  EXPECT_EQ(answer_score(many, " 4321, 8765."), 0);
  EXPECT_DOUBLE_EQ(answer_score(many, " 1234, 1234, 1234"), 1.0 / 3);  // a value counts once
  EXPECT_DOUBLE_EQ(answer_score(many, " 12345, 56789, 9012"), 1.0 / 3);  // as whole words only
  const RetrievalTask words{"3", "cwe", "", "kavo, tiru", {"kavo", "tiru"}};
  EXPECT_DOUBLE_EQ(answer_score(words, " kavoti, tiru."), 0.5);
  EXPECT_FALSE(answer_exact(many, ""));
}

// In the chat format a task is the user's turn (the prompt's trailing space gone) and the reply may
// answer in a sentence: the answer counts anywhere in it, as whole words.
TEST(EvalRetrieval, ChatFormatAsksAUserTurnAndFindsTheAnswerAnywhere) {
  auto m = load_model(FASA_BUNDLED_MODEL);  // no template: plain "role: content" lines
  const RetrievalTask key{"1", "passkey", "The pass key is 12345. What is the pass key? ", "12345", {}};
  const RetrievalTask chat = in_chat_format(*m, {key})[0];
  EXPECT_EQ(chat.prompt, render_chat(chat_style(*m), {{"user", "The pass key is 12345. What is the pass key?"}}));
  EXPECT_NE(chat.prompt, key.prompt);
  EXPECT_EQ(answer_score(chat, " The pass key is 12345."), 1);
  EXPECT_TRUE(answer_exact(chat, "It is 12345"));
  EXPECT_EQ(answer_score(chat, " The pass key is 123456."), 0);  // whole words only
  EXPECT_EQ(answer_score(key, " The pass key is 12345."), 0);     // a completion must start with it
  // Through the evaluation: every policy answers in the format and is scored by it
  std::vector<RetrievalAnswer> answers;
  const auto records = eval_retrieval(*m, {chat}, {"full"}, {"16"}, PolicyOptions{}, &answers);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().metric, "accuracy");
  EXPECT_EQ(records.front().value, answer_score(chat, answers[0].answer)) << answers[0].answer;
}

// Retrieval shares one dense prefill among policies: starting from it must equal prefilling oneself.
TEST(EvalRetrieval, SharedPrefillEqualsOwnPrefill) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const auto prompt = m->tokenizer.encode(kText, true);
  struct Rec : AttentionObserver {
    explicit Rec(const ModelConfig& c) : q(c.n_layer), row((size_t)c.n_head * c.head_dim) {}
    std::vector<std::vector<float>> q;
    size_t row;
    void on_queries(int l, int64_t, int n, const float* x, const KvCache&) override {
      q[l].insert(q[l].end(), x, x + (size_t)n * row);
    }
  } rec(m->config);
  SessionOptions so;
  so.n_ctx = (int64_t)prompt.size() + 4;
  so.n_ubatch = 16;  // several prefill chunks, as long prompts have
  Session dense(*m, so);
  dense.set_observer(&rec);
  dense.prefill(prompt);
  const Budget budget = Budget::count(8);
  for (const std::string name : {"stream", "snapkv", "h2o", "quest", "oracle"}) {
    PolicyOptions o;
    o.attn = name;
    o.budget = budget;
    Session own(*m, so, make_policy(o, *m, nullptr)), shared(*m, so, make_policy(o, *m, nullptr));
    own.prefill(prompt);
    shared.start_from_prefill(dense, rec.q);
    EXPECT_EQ(shared.n_past(), own.n_past());
    for (int32_t t : {288, 267, 1355}) {
      auto a = own.decode(t);
      const std::vector<float> want(a.begin(), a.end());
      auto b = shared.decode(t);
      EXPECT_LE(test::normalized_error(b.data(), want.data(), want.size()), 1e-6) << name;
    }
  }
}

// Free generation: prompts are windows of the text spread from its start to its end; a policy whose
// budget covers the context continues exactly as full attention does, StreamingLLM with 4 rows does
// not for long, and reads fewer KV bytes.
TEST(EvalContinuation, PromptsAndSharedPrefixesWithFullAttention) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const auto text = m->tokenizer.encode(kText, false);
  ContinuationOptions o;
  o.prompt_tokens = 24;
  o.prompts = 3;
  o.tokens = 12;
  o.first = 4;
  const auto prompts = continuation_prompts(*m, kText, o);
  ASSERT_EQ(prompts.size(), 3u);
  for (const auto& p : prompts) {
    EXPECT_EQ((int64_t)p.size(), o.prompt_tokens);
    EXPECT_EQ(p[0], m->tokenizer.bos());
  }
  EXPECT_TRUE(std::equal(prompts[0].begin() + 1, prompts[0].end(), text.begin()));
  EXPECT_TRUE(std::equal(prompts[2].begin() + 1, prompts[2].end(), text.end() - (o.prompt_tokens - 1)));
  PolicyOptions base;
  base.dense_layers = {};
  const auto r = eval_continuation(*m, prompts, {"full", "oracle", "stream"}, {"1000", "4"}, base, o);
  for (const std::string policy : {"full", "oracle", "stream"}) {
    EXPECT_EQ(value(r, policy, "shared", "1000"), o.tokens) << policy;
    EXPECT_EQ(value(r, policy, "shared_mean", "1000"), o.tokens) << policy;
    EXPECT_EQ(value(r, policy, "first_equal", "1000"), 1.0) << policy;
  }
  EXPECT_LT(value(r, "stream", "shared_mean", "4"), o.tokens);
  EXPECT_LT(value(r, "stream", "kv_kib", "4"), value(r, "full", "kv_kib", "4"));
  o.prompt_tokens = (int64_t)text.size() + 2;  // longer than the text
  EXPECT_THROW(continuation_prompts(*m, kText, o), Error);
}

// Pixels (ARGB32) of a PNG, read back with Cairo.
std::vector<uint32_t> png_pixels(const std::string& path, int& w, int& h) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  EXPECT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS) << path;
  w = cairo_image_surface_get_width(s);
  h = cairo_image_surface_get_height(s);
  std::vector<uint32_t> px((size_t)w * h);
  const unsigned char* data = cairo_image_surface_get_data(s);
  for (int y = 0; y < h; ++y)
    std::memcpy(&px[(size_t)y * w], data + (size_t)y * cairo_image_surface_get_stride(s), (size_t)w * 4);
  cairo_surface_destroy(s);
  return px;
}

// `eval choice`: each choice's log-likelihood is that of its tokens after the context's, the context's
// trailing space moved onto the choice (lm-evaluation-harness's split), equal to the dense prefill's
// logits of the whole text; a budget covering every item is full attention, a small one is not.
TEST(EvalChoice, LogLikelihoodsOfTheContinuationTokensAndTheBestChoice) {
  auto m = load_model(FASA_BUNDLED_MODEL);
  const std::string dir = test::temp_dir();
  test::write_file(dir + "/items.jsonl",
                   nlohmann::json{{"id", "light"}, {"context", kText + " And God said, Let there be "},
                                  {"choices", {"darkness: and there was darkness", "light: and there was light"}}, {"gold", 1}}.dump() + "\n");
  const std::vector<ChoiceItem> items = load_choice_items(dir + "/items.jsonl");
  for (bool bos : {true, false}) {
    std::vector<ChoiceAnswer> a;
    PolicyOptions base;
    base.dense_layers = {};
    auto r = eval_choice(*m, items, {"full", "stream"}, {"1000", "6"}, base, bos, &a);
    ASSERT_EQ(a.size(), 4u);  // full and stream, each at 1000 and 6
    EXPECT_EQ(a[0].chosen, 1);
    EXPECT_EQ(value(r, "full", "accuracy", "1000"), 1.0);
    EXPECT_EQ(a[2].loglikelihoods, a[0].loglikelihoods);  // stream with room for every row is full
    EXPECT_GT(std::abs(a[3].loglikelihoods[1] - a[0].loglikelihoods[1]), 1e-2);
    // The reference: the whole text prefilled densely, the continuation's tokens scored at their positions.
    const std::string context = kText + " And God said, Let there be";
    for (int c = 0; c < 2; ++c) {
      const bool b = bos && m->tokenizer.add_bos();
      const std::vector<int32_t> ctx = m->tokenizer.encode(context, b);
      std::vector<int32_t> whole = m->tokenizer.encode(context + " " + items[0].choices[c], b);
      Session s(*m, session_options(PolicyOptions{}, (int64_t)whole.size()));
      std::vector<float> logits;  // [whole.size(), n_vocab]
      s.prefill(whole, &logits);
      const int V = m->config.n_vocab;
      double sum = 0;
      for (size_t i = ctx.size(); i < whole.size(); ++i) {
        const std::span<const float> l(&logits[(i - 1) * V], V);
        double z = 0;
        for (float x : l) z += std::exp((double)x - l[0]);
        sum += (double)l[whole[i]] - l[0] - std::log(z);
      }
      EXPECT_NEAR(a[0].loglikelihoods[c], sum, 2e-3) << "bos " << bos << " choice " << c;
    }
  }
  for (auto [text, expect] : {std::pair<std::string, std::string>{"{\"context\":\"x\",\"choices\":[\"a\"],\"gold\":0}", "line 1: 'choices'"},
                              {"{\"context\":\"x\",\"choices\":[\"a\",\"b\"],\"gold\":2}", "line 1: 'gold'"},
                              {"{\"choices\":[\"a\",\"b\"],\"gold\":0}", "line 1: missing string field 'context'"},
                              {"[1]", "line 1: not a JSON object"},
                              {"\n", "no items"}}) {
    test::write_file(dir + "/bad.jsonl", text);
    const std::string message = test::error_message([&] { load_choice_items(dir + "/bad.jsonl"); });
    EXPECT_NE(message.find(dir + "/bad.jsonl"), std::string::npos) << message;
    EXPECT_NE(message.find(expect), std::string::npos) << message;
  }
  // A context of whitespace alone has no tokens without a BOS: an error naming the item's file and line.
  test::write_file(dir + "/blank.jsonl", "{\"context\":\"\\n\",\"choices\":[\"a\",\"b\"],\"gold\":0}\n");
  const std::string message = test::error_message([&] { eval_choice(*m, load_choice_items(dir + "/blank.jsonl"), {"full"}, {"8"}, {}, false); });
  EXPECT_NE(message.find(dir + "/blank.jsonl: line 1: the context has no tokens"), std::string::npos) << message;
}

// A head's chosen chunk is outlined: marking one cell changes the picture inside that one cell only.
TEST(EvalReports, HeatmapOutlinesTheChosenChunks) {
  Heatmap hm;
  hm.title = "mean CA";
  hm.row_axis = "query head";
  hm.col_axis = "frequency chunk";
  hm.value_label = "mean CA";
  hm.row_labels = {"head 0", "head 1"};
  hm.cols = 8;
  for (int i = 0; i < 16; ++i) hm.values.push_back(i / 15.0f);
  hm.marked = {{}, {}};
  const std::string dir = test::temp_dir();
  write_heatmap_png(hm, dir + "/plain.png");
  int w = 0, h = 0;
  const auto plain = png_pixels(dir + "/plain.png", w, h);
  // The box of pixels that marking (row, col) changes.
  auto changed_box = [&](int row, int col) {
    hm.marked = {{}, {}};
    hm.marked[row] = {col};
    write_heatmap_png(hm, dir + "/marked.png");
    int w2 = 0, h2 = 0;
    const auto px = png_pixels(dir + "/marked.png", w2, h2);
    EXPECT_EQ(w2, w);
    EXPECT_EQ(h2, h);
    std::array<int, 5> box = {w, -1, h, -1, 0};  // x0, x1, y0, y1, pixels changed
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        if (px[(size_t)y * w + x] != plain[(size_t)y * w + x]) {
          box = {std::min(box[0], x), std::max(box[1], x), std::min(box[2], y), std::max(box[3], y), box[4] + 1};
        }
    return box;
  };
  const auto a = changed_box(1, 5), b = changed_box(0, 5), c = changed_box(1, 6);
  EXPECT_GT(a[4], 40);                                 // a frame, not a speck
  EXPECT_LE(a[1] - a[0], 22) << a[0] << ".." << a[1];  // within one cell
  EXPECT_LE(a[3] - a[2], 22) << a[2] << ".." << a[3];
  EXPECT_EQ(a[2] - b[2], 22);                          // a row lower than row 0's
  EXPECT_EQ(c[0] - a[0], 22);                          // a column left of column 6's
  EXPECT_THROW(write_heatmap_png(hm, dir + "/no-such-dir/x.png"), Error);
}

// Axis ticks are round numbers covering the data, none negative for data that is not.
TEST(EvalReports, NiceTicksAreRoundAndCoverTheData) {
  EXPECT_EQ(nice_ticks(0.0012, 0.0371), (std::vector<double>{0, 0.01, 0.02, 0.03, 0.04}));
  EXPECT_EQ(nice_ticks(12.3, 97), (std::vector<double>{0, 25, 50, 75, 100}));
  EXPECT_EQ(nice_ticks(3, 3).front(), 3);  // one value: a range above it
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    const double a = std::uniform_real_distribution<double>(0, 1)(rng) * std::pow(10.0, i % 7 - 3), b = a * (1 + (i % 5));
    const std::vector<double> t = nice_ticks(a, b);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.size(), 9u);
    EXPECT_LE(t.front(), a);
    EXPECT_GE(t.back(), b * (1 - 1e-12));
    EXPECT_GE(t.front(), 0);  // KL, shares, perplexities: no negative axis
    const std::string label = tick_label(t[1], t[1] - t[0]);
    EXPECT_LE(label.size(), 8u) << label;  // 0.30000000000000004 would not be
  }
  EXPECT_EQ(tick_label(0.1 + 0.2, 0.1), "0.3");
  EXPECT_EQ(tick_label(-1e-17, 0.25), "0");
}

// The heatmap's colours span the data's range: values 0.1..0.3 use the whole colour bar, as 0..1 would.
TEST(EvalReports, HeatmapColoursSpanTheDataRange) {
  Heatmap hm;
  hm.title = hm.row_axis = hm.col_axis = hm.value_label = "x";
  hm.row_labels = {"a"};
  hm.cols = 2;
  const std::string dir = test::temp_dir();
  int w = 0, h = 0;
  hm.values = {0.0f, 1.0f};
  write_heatmap_png(hm, dir + "/wide.png");
  const auto wide = png_pixels(dir + "/wide.png", w, h);
  hm.values = {0.1f, 0.3f};
  write_heatmap_png(hm, dir + "/narrow.png");
  const auto narrow = png_pixels(dir + "/narrow.png", w, h);
  const size_t low_cell = (size_t)(56 + 11) * w + 90 + 11, high_cell = low_cell + 22;  // the cells' centres
  EXPECT_EQ(narrow[low_cell], wide[low_cell]);
  EXPECT_EQ(narrow[high_cell], wide[high_cell]);
  EXPECT_NE(narrow[low_cell], narrow[high_cell]);
}

TEST(EvalReports, MarkdownJsonCsv) {
  std::vector<EvalRecord> r = {{"ppl", "fasa", "fcs=8", "64", "kld", "", 0, 0.5, 10},
                               {"ppl", "fasa", "fcs=8", "128", "kld", "", 0, 0.25, 10},
                               {"retrieval", "full", "", "64", "accuracy", "all", 0, 0.75, 4}};
  const std::string md = records_markdown(r);
  EXPECT_NE(md.find("| fasa [fcs=8] | 0.5000 | 0.2500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("### retrieval accuracy (all), %"), std::string::npos) << md;
  EXPECT_NE(md.find("### ppl kld, nats"), std::string::npos) << md;
  EXPECT_NE(md.find("75.0"), std::string::npos);
  const std::string dir = test::temp_dir();
  write_records_json(r, dir + "/r.json");
  auto j = nlohmann::json::parse(test::read_file(dir + "/r.json"));
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["eval"], "ppl");
  EXPECT_EQ(j[0]["metric"], "kld");
  EXPECT_EQ(j[0]["value"], 0.5);
  EXPECT_EQ(j[0]["budget"], 64);  // a number, and its unit
  EXPECT_TRUE(j[0]["budget"].is_number_integer());
  EXPECT_EQ(j[0]["budget_unit"], "tokens");
  EXPECT_EQ(j[2]["task_type"], "all");
  EXPECT_EQ(j[2]["value"], 75.0);  // shares in percent, as in the markdown
  EXPECT_EQ(j[2]["unit"], "%");
  write_records_plot(r, "kld", dir + "/kld.png");
  EXPECT_EQ(test::read_file(dir + "/kld.png").substr(1, 3), "PNG");
  EXPECT_THROW(write_records_plot(r, "nll", dir + "/none.png"), Error);
  EXPECT_THROW(write_records_plot(r, "kld", dir + "/none.png", "kv_kib"), Error);  // no kv_kib records
  r.push_back({"ppl", "fasa", "fcs=8", "64", "kv_kib", "", 0, 20, 10});
  r.push_back({"ppl", "fasa", "fcs=8", "128", "kv_kib", "", 0, 36, 10});
  write_records_plot(r, "kld", dir + "/kld_bytes.png", "kv_kib");
  int w = 0, h = 0;
  EXPECT_NE(png_pixels(dir + "/kld_bytes.png", w, h), png_pixels(dir + "/kld.png", w, h));
  // read back as written: the same records, a share budget spelled as a percentage
  write_records_json(r, dir + "/all.json");
  const std::vector<EvalRecord> back = read_records_json(dir + "/all.json");
  ASSERT_EQ(back.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(back[i].policy + back[i].variant + back[i].metric + back[i].task_type, r[i].policy + r[i].variant + r[i].metric + r[i].task_type);
    EXPECT_EQ(Budget::parse(back[i].budget).value, Budget::parse(r[i].budget).value) << back[i].budget;
    EXPECT_EQ(Budget::parse(back[i].budget).fraction, Budget::parse(r[i].budget).fraction) << back[i].budget;
    EXPECT_DOUBLE_EQ(back[i].value, r[i].value);
    EXPECT_EQ(back[i].n, r[i].n);
  }
  const std::vector<EvalRecord> shares = {{"ppl", "fasa", "", "1.0", "kld", "", 0, 0.5, 10}};  // all of the context
  write_records_json(shares, dir + "/share.json");
  EXPECT_TRUE(Budget::parse(read_records_json(dir + "/share.json")[0].budget).fraction);
  test::write_file(dir + "/bad.json", R"([{"eval": "ppl"}])");
  EXPECT_NE(test::error_message([&] { read_records_json(dir + "/bad.json"); }).find(dir + "/bad.json"), std::string::npos);
  write_records_csv(r, dir + "/r.csv");
  const std::string csv = test::read_file(dir + "/r.csv");
  EXPECT_EQ(csv.rfind("eval,policy,variant,budget,budget_unit,metric,task_type,topk,value,unit,n\n", 0), 0u);
  EXPECT_NE(csv.find("retrieval,full,\"\",64,tokens,accuracy,all,0,75,%,4"), std::string::npos) << csv;
  const std::vector<EvalRecord> ca = {{"ca", "fasa", "", "16", "ca", "", 16, 0.5, 3}};
  EXPECT_NE(records_markdown(ca).find("| policy \\ top-K | 16 |"), std::string::npos) << records_markdown(ca);
}

}  // namespace
}  // namespace fasa
