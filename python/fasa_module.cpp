// fasa's Python module (_fasa): the public C++ API (include/fasa/) with the settings given as keywords,
// each read by set_policy_option as the CLI's flags are. The GIL is released while the engine computes.
#include <omp.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <deque>
#include <memory>
#include <string>

#include "bench/bench_rows.h"
#include "eval/decode_eval.h"
#include "eval/continuation.h"
#include "eval/retrieval.h"
#include "eval/task_gen.h"
#include "fasa/fasa.h"
#include "model/model.h"
#include "ops/kv_rows.h"
#include "sparse/policy.h"

namespace py = pybind11;
using namespace pybind11::literals;
using namespace fasa;

namespace {

// A keyword's value as set_policy_option reads it: True -> "true", 0.5 -> "0.5", [0, 2] -> "0,2".
std::string setting_text(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  // ints and floats, NumPy's too (numpy.int64 has __index__; repr(numpy.float64) is not a number, and
  // NumPy 2's float64 is a float: its value goes through a plain Python float)
  if (PyIndex_Check(v.ptr())) return py::str(py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()))).cast<std::string>();
  if (PyFloat_Check(v.ptr()) || py::hasattr(v, "__float__"))
    return py::repr(py::float_(py::reinterpret_borrow<py::object>(v).cast<double>())).cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::string s;
    for (const py::handle& item : v) {
      if (!s.empty()) s += ',';
      s += setting_text(item);
    }
    return s;
  }
  throw Error("a setting's value must be a string, a number, a bool or a list, got " + py::repr(v).cast<std::string>());
}

// float32 values handed to Python without a copy (the buffer protocol): a NumPy array over them
// where NumPy is installed, else a memoryview (indexing, len, tolist(); NumPy wraps it later without
// a copy too). NumPy is optional: a venv without it generates, runs Python policies and reads logits.
class Floats {
 public:
  explicit Floats(std::vector<py::ssize_t> shape) : shape_(std::move(shape)) {
    py::ssize_t n = 1;
    for (py::ssize_t d : shape_) n *= d;
    values_.resize(n);
  }
  float* data() { return values_.data(); }
  py::buffer_info buffer() {
    std::vector<py::ssize_t> strides(shape_.size(), (py::ssize_t)sizeof(float));
    for (size_t i = shape_.size(); i-- > 1;) strides[i - 1] = strides[i] * shape_[i];
    return py::buffer_info(values_.data(), sizeof(float), py::format_descriptor<float>::format(), (py::ssize_t)shape_.size(),
                           shape_, strides);
  }

 private:
  std::vector<py::ssize_t> shape_;
  std::vector<float> values_;  // [prod(shape)], row-major
};

// numpy.asarray, or None without NumPy: looked up once, at import (a lookup from a decode thread would
// wait for an import that waits for the GIL that thread holds). Leaked: it lives as long as the process.
py::object& numpy_asarray() {
  static py::object* asarray = new py::object(py::none());
  return *asarray;
}

// `values` as Python sees them: a NumPy array or a memoryview over the same memory.
py::object to_python(std::unique_ptr<Floats> values) {
  py::object owner = py::cast(std::move(values));
  return numpy_asarray().is_none() ? py::memoryview(owner) : numpy_asarray()(owner);
}

// A policy written in Python (fasa.register_policy): fn(layer, kv_head, queries, keys, budget) gets the
// GQA group's queries [n_q, head_dim] and the head's cached keys [n_tokens, head_dim] (float32 copies,
// post-RoPE) and returns the rows all of the group's heads attend to. SparsePolicy keeps the C++
// policies' contract: dense layers and budgets covering the context attend to everything without
// asking fn. Called from the decode threads, one at a time (the GIL).
class PythonPolicy final : public SparsePolicy {
 public:
  PythonPolicy(std::string name, py::function fn, const PolicyOptions& o, int n_layer)
      : SparsePolicy(o.budget, o.dense_layers, n_layer), name_(std::move(name)), fn_(std::move(fn)) {}
  ~PythonPolicy() override {
    py::gil_scoped_acquire gil;  // the function's reference goes with the GIL held
    fn_ = py::function();
  }
  std::string_view name() const override { return name_; }

  void pick(const AttentionQuery* queries, int n_q, const KvHeadView& kv, int64_t budget,
            std::vector<int32_t>* rows) override {
    const int D = kv.head_dim;
    const int64_t n = kv.n_tokens;
    py::gil_scoped_acquire gil;
    try {
      auto q = std::make_unique<Floats>(std::vector<py::ssize_t>{n_q, D});
      auto keys = std::make_unique<Floats>(std::vector<py::ssize_t>{(py::ssize_t)n, D});
      for (int i = 0; i < n_q; ++i) std::copy_n(queries[i].q, D, q->data() + (size_t)i * D);
      for (int64_t r = 0; r < n; ++r) {  // (the identity key layout: no K_dom plane)
        float* row = keys->data() + (size_t)r * D;
        if (kv.n_dom > 0) kv_load(kv.k_dom_row(r), kv.k_type, kv.n_dom, row);
        kv_load(kv.k_rest_row(r), kv.k_type, D - kv.n_dom, row + kv.n_dom);
      }
      const py::object picked =
          fn_(queries[0].layer, queries[0].kv_head, to_python(std::move(q)), to_python(std::move(keys)), budget);
      const std::string must = "policy '" + name_ + "' must return a non-empty list of row numbers";
      if (!py::isinstance<py::iterable>(picked) || py::isinstance<py::str>(picked)) throw Error(must);
      std::vector<char> seen(n, 0);
      for (const py::handle& item : picked) {  // a list, a tuple, a NumPy array of ints ...
        if (!PyIndex_Check(item.ptr())) throw Error(must + ", got an item " + py::repr(item).cast<std::string>());
        PyObject* index = PyNumber_Index(item.ptr());  // null where __index__ raises (a row of a 2-D array)
        if (!index) throw py::error_already_set();
        const int64_t r = py::reinterpret_steal<py::int_>(index).cast<int64_t>();
        if ((int64_t)rows[0].size() == budget)
          throw Error("policy '" + name_ + "' returned more than " + std::to_string(budget) + " rows for a budget of " +
                      std::to_string(budget));
        if (r < 0 || r >= n)
          throw Error("policy '" + name_ + "' returned row " + std::to_string(r) + ", outside the context of " +
                      std::to_string(n) + " rows");
        if (seen[r]++) throw Error("policy '" + name_ + "' returned row " + std::to_string(r) + " twice");
        rows[0].push_back((int32_t)r);
      }
      if (rows[0].empty()) throw Error(must);
    } catch (py::error_already_set& e) {  // a Python error, as the library's (with the GIL still held)
      throw Error("policy '" + name_ + "': " + e.what());
    }
    for (int i = 1; i < n_q; ++i) rows[i] = rows[0];
  }

 private:
  std::string name_;
  py::function fn_;
};

// n_ctx and threads: whole numbers in range, as the CLI's -c and -t check them.
int64_t count_setting(const std::string& name, const py::handle& v, int64_t lo, int64_t hi) {
  if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr()))
    throw Error(name + ": must be a whole number, got " + py::repr(v).cast<std::string>());
  const int64_t n = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr())).cast<int64_t>();
  if (n < lo || n > hi)
    throw Error(name + ": must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + std::to_string(n));
  return n;
}

ContextOptions context_options(const py::kwargs& settings) {
  ContextOptions o;
  if (settings.contains("kv_type"))  // first, as the CLI reads it: cache_type_k/v then override it
    set_policy_option(o.policy, "kv_type", setting_text(settings["kv_type"]));
  for (const auto& [key, value] : settings) {
    const std::string name = key.cast<std::string>();
    if (name == "n_ctx") o.n_ctx = count_setting(name, value, 0, (int64_t)1 << 24);  // 0: the model's
    else if (name == "threads") o.threads = (int)count_setting(name, value, 0, 1024);  // 0: all cores
    else if (name != "kv_type") set_policy_option(o.policy, name, setting_text(value));
  }
  return o;
}

// fasa.register_policy's functions by name. Leaked, as numpy_asarray: the library's registry rows that
// find them by name live until the process ends, after Python.
py::dict& python_policies() {
  static py::dict* policies = new py::dict();
  return *policies;
}

// A row in the library's policy registry (sparse/policy.h) whose factory makes a PythonPolicy of the
// function registered under `name` now: contexts, evaluations and bench then run it by name.
void register_python_policy(const std::string& name, const std::string& description, const py::function& fn) {
  register_policy({name, description, false, false,
                   [name](const PolicyOptions& o, const Model& model, AutoProfileStore*) -> std::unique_ptr<AttentionPolicy> {
                     py::gil_scoped_acquire gil;  // (evaluations make policies without it)
                     py::function f = python_policies()[py::str(name)];
                     return std::make_unique<PythonPolicy>(name, std::move(f), o, model.config.n_layer);
                   }});
  python_policies()[py::str(name)] = fn;
}

// An evaluation of the policies `attn` on `settings`' options, run without the GIL: its records as
// Python dicts, as `fasa eval ... --json` writes them. A list-capable setting given a list (fcs=[4, 8])
// gives a variant per value, as the CLI's --fcs 4,8.
//   run: (const PolicyOptions& base, const std::vector<std::string>& policies) -> std::vector<EvalRecord>
// `own`: the function's own keywords, which a mistaken setting's error lists beside the settings.
template <class Run>
py::object eval_records(const char* own, const py::kwargs& settings, const std::vector<std::string>& attn, const Run& run) {
  py::kwargs single;
  SettingLists lists;
  for (const auto& [key, value] : settings) {
    const std::string name = py::str(key);
    if (is_list_setting(name) && (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value))) {
      std::vector<std::string> values;
      for (const py::handle& v : value) values.push_back(setting_text(v));
      lists.emplace_back(name, std::move(values));
    } else {
      single[key] = value;
    }
  }
  ContextOptions base;
  try {
    base = context_options(single);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; and this function's own keywords: " + own);
  }
  const std::vector<std::string> policies = cross_settings(attn, lists);
  std::string json;
  {
    py::gil_scoped_release released;
    if (base.threads > 0) omp_set_num_threads(base.threads);
    json = records_json(run(base.policy, policies));
  }
  return py::module_::import("json").attr("loads")(json);
}

// Budgets as the CLI's --budget list gives them (16, 0.5, "50%" -> "16", "0.5", "50%"): `budgets`, or
// the CLI's name for them among the settings (budget=16, budget=[16, 0.5]), taken out of them; neither: 64.
std::vector<std::string> budget_texts(const py::object& budgets, const py::kwargs& settings) {
  py::object given = budgets.is_none() ? py::make_tuple(64) : budgets;
  if (settings.contains("budget")) {
    if (!budgets.is_none()) throw Error("give budgets= or budget= (the CLI's name), not both");
    given = settings.attr("pop")("budget");
    if (!py::isinstance<py::list>(given) && !py::isinstance<py::tuple>(given)) given = py::make_tuple(given);
  }
  std::vector<std::string> out;
  for (const py::handle& b : given) out.push_back(setting_text(b));
  return out;
}

GenerationOptions generation_options(int max_tokens, float temperature, int top_k, float top_p, uint64_t seed,
                                     const std::vector<std::string>& stop, bool ignore_eos) {
  GenerationOptions g;
  g.max_tokens = max_tokens;
  g.sampling = {temperature, top_k, top_p, seed};
  g.stop = stop;
  g.ignore_eos = ignore_eos;
  return g;
}

// ctx.stream(...): a Batch of one member stepped on each next(), the text pieces of a step queued.
class TextStream {
 public:
  TextStream(Context& ctx, const GenerationOptions& g) : batch_({.threads = ctx.options().threads}) {
    batch_.add(ctx, {}, g, [this](std::string_view piece) {
      pieces_.emplace_back(piece);
      return !cancelled_;
    }, [this](GenerationResult, std::exception_ptr e) { error_ = e; });
  }
  // Dropped before the end: the generation is cancelled at its next token, so the context is whole.
  ~TextStream() {
    cancelled_ = true;
    py::gil_scoped_release released;  // a Python policy's decode threads need it
    try {
      while (batch_.size() > 0) batch_.step();
    } catch (...) {  // the member failed: its context says so on its next use
    }
  }
  std::string next() {
    while (pieces_.empty() && batch_.size() > 0) {
      py::gil_scoped_release released;
      batch_.step();
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    if (pieces_.empty()) throw py::stop_iteration();
    std::string piece = std::move(pieces_.front());
    pieces_.pop_front();
    return piece;
  }

 private:
  Batch batch_;
  std::deque<std::string> pieces_;
  std::exception_ptr error_;
  bool cancelled_ = false;
};

py::dict stats_dict(Context& c) {
  const ContextStats s = c.stats();
  py::dict d;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["prompt_seconds"] = s.prompt_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["kv_bytes_read"] = s.kv_bytes_read;
  d["n_past"] = c.n_past();
  d["n_ctx"] = c.n_ctx();
  d["kv_fast_bytes"] = c.kv_memory().fast;
  d["memory_estimate_bytes"] = c.memory_estimate().total();  // weights as held, vocabulary, KV cache, scratch
  d["policy"] = c.policy_summary();
  return d;
}

}  // namespace

namespace {

// fasa.policies, register_policy, settings and bench.
void bind_functions(py::module_& m) {
  m.def("policies", [] {
    py::list out;
    for (const PolicyInfo& p : policy_registry()) {
      py::dict d;
      d["name"] = p.name, d["description"] = p.description, d["dense"] = p.dense;
      d["takes"] = py::str(p.takes).attr("split")();
      out.append(d);
    }
    return out;
  }, "The attention policies: name, description, whether it is dense, the settings of its own it takes (the built-in ones, then Python's).");
  m.def("register_policy", &register_python_policy, py::arg("name"), py::arg("description"), py::arg("fn"),
        "Adds (or replaces) a policy written in Python: fasa.register_policy says how fn is called.");
  m.def("settings", [] { return policy_option_names(); }, "The keywords Engine.context takes besides n_ctx and threads.");

  m.def("bench", [](const Engine& e, const std::vector<int>& n_prompt, const std::vector<int>& n_gen,
                    const std::vector<int64_t>& depth, const std::vector<int>& parallel, const std::vector<std::string>& attn,
                    int repetitions, bool random_fill, bool attention_only, const py::kwargs& settings) {
    const ContextOptions base = context_options(settings);
    if (repetitions < 1 || attn.empty()) throw Error("bench: give at least one attn and one repetition");
    BenchPlan plan;
    plan.threads = {base.threads};
    const KvOffloadOptions& off = base.policy.cache.offload;
    plan.policies = bench_policies(base.policy, attn, {off.offloaded() ? offload_str(off) : "none"},
                                   {off.prefetch ? "on" : "off"});
    for (int n : n_prompt)
      if (n > 0) plan.tests.emplace_back(n, 0);
    for (int n : n_gen)
      if (n > 0) plan.tests.emplace_back(0, n);
    plan.depths = depth, plan.parallel = parallel, plan.repetitions = repetitions;
    plan.random_fill = random_fill, plan.attention_only = attention_only;
    std::string json;
    {
      py::gil_scoped_release released;
      const std::vector<BenchRow> rows = run_bench_plan(e.model(), plan, [](const BenchRow&) {});
      json = render_bench_rows(rows, {e.info().path, &e.model(), &plan.policies[0], &plan}, "json");
    }
    return py::module_::import("json").attr("loads")(json);
  }, py::arg("engine"), py::arg("n_prompt") = std::vector<int>{512}, py::arg("n_gen") = std::vector<int>{128},
     py::arg("depth") = std::vector<int64_t>{0}, py::arg("parallel") = std::vector<int>{1},
     py::arg("attn") = std::vector<std::string>{kDenseAttn, kFasaAttn}, py::arg("repetitions") = 5, py::arg("random_fill") = false,
     py::arg("attention_only") = false,
     "`fasa bench`: prompt processing (n_prompt) and decoding (n_gen) at each depth, for each attn, as llama-bench "
     "runs them; parallel: sequences together (-npl); the other keywords as engine.context's (threads, budget, "
     "profile, kv_type, ...). Returns the rows as `fasa bench -o json` prints them (a list of dicts).");

}

void bind_engine(py::module_& m) {
  py::class_<Engine>(m, "Engine", "A loaded model; fasa.Engine(model=None) loads the bundled one.")
      .def(py::init([](const std::string& model, int gpu_layers, int device, bool mmap, bool mlock) {
             return std::make_unique<Engine>(model, EngineOptions{.gpu_layers = gpu_layers, .device = device,
                                                                  .mmap = mmap, .mlock = mlock});
           }),
           py::arg("model"), py::arg("gpu_layers") = 0, py::arg("device") = 0, py::arg("mmap") = true,
           py::arg("mlock") = false, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("info", [](const Engine& e) {  // (docstring below)
        const ModelInfo& i = e.info();
        py::dict d;
        d["path"] = i.path, d["format"] = i.format, d["arch"] = i.arch, d["n_params"] = i.n_params;
        d["n_ctx_train"] = i.n_ctx_train, d["n_vocab"] = i.n_vocab, d["chat_format"] = i.chat_format;
        d["weight_bytes"] = i.weight_bytes, d["held_weight_bytes"] = i.held_weight_bytes;
        d["packed_weight_bytes"] = i.packed_weight_bytes, d["locked_weight_bytes"] = i.locked_weight_bytes;
        d["device"] = i.device;
        return d;
      }, "The model: path, format, arch, n_params, n_ctx_train, n_vocab, chat_format, weight_bytes (the "
         "matrices' bytes in the file), held_weight_bytes (what they hold in memory), packed_weight_bytes (of that, "
         "the copy packed for this CPU), locked_weight_bytes (of that, locked in RAM: mlock=True), device (where it runs: 'CPU', or the Vulkan device with gpu_layers).")
      .def("tokenize", [](const Engine& e, const std::string& text, bool add_bos, bool parse_special) {
        return e.tokenize(text, add_bos, parse_special);
      }, py::arg("text"), py::arg("add_bos") = true, py::arg("parse_special") = false,
         "The token ids of `text` (a list of ints); add_bos: the model's BOS first, where it has one; "
         "parse_special: '<|...|>' markers in the text as their special tokens.")
      .def("detokenize", &Engine::detokenize, py::arg("ids"), "The text of the token ids `ids`.")
      .def("context", [](const Engine& e, const py::kwargs& settings) {
        const ContextOptions o = context_options(settings);
        py::gil_scoped_release released;
        return std::make_unique<Context>(e, o);
      }, py::keep_alive<0, 1>(), "A context: n_ctx, threads, and any of fasa.settings() as keywords (as `fasa run`'s flags); "
         "attn may name a policy from fasa.register_policy.");

}

void bind_context(py::module_& m) {
  py::class_<Context>(m, "Context",
                      "A context of an engine: its own KV cache, policy and threads (engine.context(...)). One "
                      "call at a time: a stream in progress owns it until it ends or is dropped.")
      .def("feed", [](Context& c, const std::string& text) { return c.feed(text); }, py::arg("text"),
           py::call_guard<py::gil_scoped_release>(), "Appends text; returns the tokens added.")
      .def("feed_tokens", [](Context& c, const std::vector<int32_t>& ids) { c.feed_tokens(ids); }, py::arg("ids"),
           py::call_guard<py::gil_scoped_release>(), "Appends the token ids `ids` (prefilled at once).")
      .def("generate", [](Context& c, const std::optional<std::string>& prompt, int max_tokens, float temperature, int top_k,
                          float top_p, uint64_t seed, const std::vector<std::string>& stop, bool ignore_eos) {
        const GenerationOptions g = generation_options(max_tokens, temperature, top_k, top_p, seed, stop, ignore_eos);
        py::gil_scoped_release released;
        if (prompt) c.feed(*prompt);
        return c.generate(g).text;
      }, py::arg("prompt") = py::none(), py::arg("max_tokens") = 64, py::arg("temperature") = 0.0f, py::arg("top_k") = 40,
         py::arg("top_p") = 0.95f, py::arg("seed") = 42, py::arg("stop") = std::vector<std::string>{},
         py::arg("ignore_eos") = false, "Feeds `prompt` (if any), then returns the generated text (greedy at temperature 0).")
      .def("stream", [](Context& c, const std::optional<std::string>& prompt, int max_tokens, float temperature, int top_k,
                        float top_p, uint64_t seed, const std::vector<std::string>& stop, bool ignore_eos) {
        const GenerationOptions g = generation_options(max_tokens, temperature, top_k, top_p, seed, stop, ignore_eos);
        if (prompt) {
          py::gil_scoped_release released;
          c.feed(*prompt);
        }
        return std::make_unique<TextStream>(c, g);
      }, py::arg("prompt") = py::none(), py::arg("max_tokens") = 64, py::arg("temperature") = 0.0f, py::arg("top_k") = 40,
         py::arg("top_p") = 0.95f, py::arg("seed") = 42, py::arg("stop") = std::vector<std::string>{},
         py::arg("ignore_eos") = false, py::keep_alive<0, 1>(), "As generate, an iterator over the text's pieces.")
      .def("logits", [](Context& c) {
        std::unique_ptr<Floats> out;
        {
          py::gil_scoped_release released;
          const std::span<const float> l = c.logits();
          out = std::make_unique<Floats>(std::vector<py::ssize_t>{(py::ssize_t)l.size()});
          std::copy(l.begin(), l.end(), out->data());  // the context's own change with its next step
        }
        return to_python(std::move(out));
      }, "The next token's logits [n_vocab], float32: a NumPy array, or a memoryview where NumPy is not installed.")
      .def("truncate", &Context::truncate, py::arg("n"), py::call_guard<py::gil_scoped_release>(),
           "Keeps the first n tokens and forgets the rest (to go back to a shared prefix).")
      .def_property_readonly("n_past", &Context::n_past, "Tokens in the context now.")
      .def_property_readonly("n_ctx", &Context::n_ctx, "The context's size in tokens.")
      .def_property_readonly("tokens", &Context::tokens, "The token ids in the context, in order.")
      .def("stats", &stats_dict,
           "prompt_tokens and generated_tokens so far, prompt_seconds and decode_seconds, n_past, n_ctx, "
           "kv_fast_bytes (the KV cache's fast memory), memory_estimate_bytes (weights as held, vocabulary, KV "
           "cache and scratch: about the process's resident memory) and policy (what the context attends with).");

  py::class_<TextStream>(m, "TextStream", "context.stream(...)'s iterator: each next() is the next piece of text "
                                          "(whole UTF-8 characters); dropping it early cancels the generation.")
      .def("__iter__", [](TextStream& s) -> TextStream& { return s; })
      .def("__next__", &TextStream::next, "The next piece of text; StopIteration at the end.");
}

void bind_eval_retrieval(py::module_& eval) {
  eval.def("retrieval", [](const Engine& e, const std::optional<std::string>& tasks, const std::vector<std::string>& generate,
                           const std::vector<int64_t>& lengths, int n, uint64_t seed, const std::string& haystack,
                           int limit, const std::vector<std::string>& attn, const py::object& budgets, bool distractors,
                           const std::string& qa_entries, bool answers, int min_answer_tokens, bool chat,
                           const py::kwargs& settings) -> py::object {
    std::vector<RetrievalAnswer> got;
    py::object records = eval_records("engine, tasks, generate, lengths, n, seed, haystack, limit, attn, budgets (or budget), distractors, qa_entries, answers, min_answer_tokens, chat, threads", settings, attn, [&, budgets = budget_texts(budgets, settings)](const PolicyOptions& policy,
                                                                                 const std::vector<std::string>& policies) {
      std::vector<RetrievalTask> list;
      if (!generate.empty()) {
        TaskGenOptions g;
        g.kinds = expand_task_kinds(generate);
        g.lengths = lengths, g.n = n, g.seed = seed, g.haystack_file = haystack, g.distractors = distractors;
        g.qa_entries_file = qa_entries;
        list = generate_retrieval_tasks(e.model().tokenizer, g);
      } else if (tasks) {
        list = load_retrieval_tasks(*tasks, limit);
      } else {
        throw Error("eval.retrieval: give tasks=FILE or generate=[KINDS]");
      }
      list = tasks_with_answers_of_at_least(e.model(), std::move(list), min_answer_tokens);
      if (chat) list = in_chat_format(e.model(), std::move(list));
      return eval_retrieval(e.model(), list, policies, budgets, policy, answers ? &got : nullptr);
    });
    if (!answers) return records;
    py::list out;
    for (const RetrievalAnswer& a : got)
      out.append(py::dict("id"_a = a.task_id, "type"_a = a.type, "policy"_a = a.policy, "variant"_a = a.variant,
                          "budget"_a = a.budget, "expected"_a = a.expected,
                          "answer"_a = py::bytes(a.answer).attr("decode")("utf-8", "replace"), "score"_a = a.score));
    return py::make_tuple(records, out);
  }, py::arg("engine"), py::arg("tasks") = py::none(), py::arg("generate") = std::vector<std::string>{},
     py::arg("lengths") = std::vector<int64_t>{4096}, py::arg("n") = 20, py::arg("seed") = 0, py::arg("haystack") = "",
     py::arg("limit") = 0, py::arg("attn") = std::vector<std::string>{kDenseAttn}, py::arg("budgets") = py::none(),
     py::arg("distractors") = false, py::arg("qa_entries") = "", py::arg("answers") = false,
     py::arg("min_answer_tokens") = 1, py::arg("chat") = false,
     "`fasa eval retrieval`: tasks from a JSON-lines file or generated (distractors=True: look-alike needles; "
     "kind qa asks the dictionary entries of qa_entries=FILE; min_answer_tokens=2 leaves out one-token answers; "
     "chat=True asks each as a user turn in the model's chat format, the answer counted anywhere in the reply); "
     "every attn x budget (budgets, or budget= as the CLI's --budget; default [64]) (attn entries may carry settings, 'fasa:fcs=4'; a list for a setting such as "
     "fcs=[4, 8] gives a variant each); the other keywords as engine.context's. Returns the records (a list of dicts), as --json writes them; with answers=True, "
     "(records, answers): each task's greedy answer beside the expected one, as --answers writes them.");

}

void bind_eval_text(py::module_& eval) {
  // ppl and ca: every window of `text` decoded token by token against full attention's reference.
  eval.def("ppl", [](const Engine& e, const std::string& text, int64_t window, int windows, int64_t score_from,
                     const std::vector<std::string>& attn, const py::object& budgets, const py::kwargs& settings) {
    return eval_records("engine, text, window, windows, score_from, attn, budgets (or budget), threads", settings, attn, [&, budgets = budget_texts(budgets, settings)](const PolicyOptions& policy,
                                                                                 const std::vector<std::string>& policies) {
      const TextEvalOptions o{window, windows, score_from};
      return eval_perplexity(e.model(), reference_run(e.model(), text, o), policies, budgets, policy, o);
    });
  }, py::arg("engine"), py::arg("text"), py::arg("window") = 0, py::arg("windows") = 8, py::arg("score_from") = 0,
     py::arg("attn") = std::vector<std::string>{kDenseAttn}, py::arg("budgets") = py::none(),
     "`fasa eval ppl` on `text` (a string): nll, ppl, kld, top1 and kv_kib (KV read per step) against full attention per attn x budget "
     "(budgets, or budget= as the CLI's --budget; default [64]); "
     "window: tokens per window (0: the model's context). Returns the records, as --json writes them.");
  eval.def("ca", [](const Engine& e, const std::string& text, int64_t window, int windows, int64_t score_from,
                    const std::vector<std::string>& attn, const std::vector<int>& top_k, const py::kwargs& settings) {
    return eval_records("engine, text, window, windows, score_from, attn, top_k, threads", settings, attn, [&](const PolicyOptions& policy, const std::vector<std::string>& policies) {
      const TextEvalOptions o{window, windows, score_from};
      return eval_selection_agreement(e.model(), reference_run(e.model(), text, o), policies, top_k, policy, o);
    });
  }, py::arg("engine"), py::arg("text"), py::arg("window") = 0, py::arg("windows") = 8, py::arg("score_from") = 0,
     py::arg("attn") = std::vector<std::string>{kFasaAttn}, py::arg("top_k") = std::vector<int>{64},
     "`fasa eval ca` on `text`: the share of the exact top-K each policy selects. Returns the records.");

  eval.def("continuation", [](const Engine& e, const std::string& text, int64_t prompt_tokens, int prompts, int tokens,
                              int first, const std::vector<std::string>& attn, const py::object& budgets,
                              const py::kwargs& settings) {
    return eval_records("engine, text, prompt_tokens, prompts, tokens, first, attn, budgets (or budget), threads", settings, attn, [&, budgets = budget_texts(budgets, settings)](const PolicyOptions& policy,
                                                                                 const std::vector<std::string>& policies) {
      const ContinuationOptions o{prompt_tokens, prompts, tokens, first};
      return eval_continuation(e.model(), continuation_prompts(e.model(), text, o), policies, budgets, policy, o);
    });
  }, py::arg("engine"), py::arg("text"), py::arg("prompt_tokens") = 4096, py::arg("prompts") = 50, py::arg("tokens") = 64,
     py::arg("first") = 16, py::arg("attn") = std::vector<std::string>{kDenseAttn}, py::arg("budgets") = py::none(),
     "`fasa eval continuation` on `text`: greedy continuations of `prompts` windows of it, the leading tokens each "
     "attn x budget (budgets, or budget=; default [64]) shares with full attention's (shared: median; shared_mean; "
     "first_equal). Returns the records.");

}

}  // namespace

PYBIND11_MODULE(_fasa, m) {
  m.doc() = "fasa: long-context decoding with Frequency-Aware Sparse Attention";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  m.attr("Error").attr("__doc__") = "A bad setting, file or request: the library's message (a ValueError).";
  py::class_<Floats>(m, "Floats", py::buffer_protocol(), "float32 values (logits(), a policy's queries and keys) as a buffer")
      .def_buffer(&Floats::buffer);
  try {
    numpy_asarray() = py::module_::import("numpy").attr("asarray");
  } catch (py::error_already_set&) {  // no NumPy: memoryviews instead
  }
  m.attr("source_model") = FASA_DEFAULT_MODEL;  // the bundled model in the checkout it was built from

  bind_functions(m);
  bind_engine(m);
  bind_context(m);
  py::module_ eval = m.def_submodule("eval", "Evaluations as `fasa eval` runs them, records as its --json writes them.");
  bind_eval_retrieval(eval);
  bind_eval_text(eval);
}
