// The Vulkan backend (src/gpu/) against the CPU path: the matvec shaders against a plain dot product
// on random rows of every weight type; whole models (llama, qwen2's biases, qwen3's Q/K norms, phi3;
// F32, F16, Q8_0) with logits every step close to the CPU's; the bundled model's greedy text equal;
// one submit per token; FASA (C and M) and Quest choosing the CPU's rows; what it does not run
// refused by name. Runs on any Vulkan driver (Mesa's lavapipe
// in CI). Without one the tests skip, saying why — unless FASA_REQUIRE_VULKAN is set (CI sets it), where
// they fail.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "bench/synthetic_model.h"
#include "calib/profile.h"
#include "fasa/fasa.h"
#include "gpu/device_loader.h"
#include "model/model.h"
#include "model/session.h"
#include "ops/dtype.h"
#include "ops/packed_rows.h"
#include "sparse/fasa.h"
#include "sparse/policy.h"
#include "test_util.h"

#ifdef FASA_HAS_VULKAN
#include "gpu/vulkan_device.h"
#include "gpu/vulkan_model.h"
#endif

namespace fasa {
namespace {

// The model on Vulkan device 0, or null with the reason in `why`.
std::unique_ptr<DeviceModel> on_device(const Model& model, std::string& why) {
  try {
    return gpu::load_vulkan_model(model, 0);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

// An Engine with every layer on Vulkan device 0 (-ngl 99), or null with the reason in `why`.
std::unique_ptr<Engine> engine_on_device(const std::string& path, std::string& why) {
  try {
    return std::make_unique<Engine>(path, EngineOptions{.gpu_layers = 99});
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

#define SKIP_WITHOUT_VULKAN(dev, why)                                                      \
  if (!(dev)) {                                                                            \
    if (std::getenv("FASA_REQUIRE_VULKAN")) FAIL() << "FASA_REQUIRE_VULKAN is set: " << (why); \
    GTEST_SKIP() << "no Vulkan device: " << (why);                                         \
  }

ModelShape tiny_shape(const std::string& arch) {
  // 2 layers, 64 dims, 4 query heads on 2 KV heads of 16 dims, a 300-token vocabulary.
  return {"tiny-" + arch, arch, 2, 64, 4, 2, 96, 300, 256, 10000.0f, 0.0f, false};
}

// Where a session runs (a device, or null: the CPU) and how it attends (null: full attention);
// fasa_m: its sparse layers' K and V in host memory (--kv-offload ram).
struct Side {
  const DeviceModel* device = nullptr;
  std::shared_ptr<AttentionPolicy> policy;
  bool fasa_m = false;
};

SessionOptions options_of(const Side& side) {
  SessionOptions so;
  so.n_ctx = 256;
  so.device = side.device;
  if (side.fasa_m) so.cache.offload.tier = KvOffloadOptions::Tier::Ram;
  return so;
}

// Teacher-forced: both sessions see a's greedy tokens; the worst normalised error of b's logits
// against a's over every step (the prompt's last and `steps` decode steps). random_fill: the same
// prompt_tokens rows of random K/V in both caches (Session::fill_random) instead of a prompt.
double worst_logit_error(const Model& model, const Side& a_side, const Side& b_side, int steps, int prompt_tokens = 8,
                         bool random_fill = false) {
  Session cpu(model, options_of(a_side), a_side.policy);
  Session gpu(model, options_of(b_side), b_side.policy);
  std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 250, 3, 64};
  for (int i = 8; i < prompt_tokens; ++i) prompt.push_back((int32_t)(i * 37 % 290 + 5));
  if (random_fill) {
    cpu.fill_random(prompt_tokens, 7);
    gpu.fill_random(prompt_tokens, 7);
    prompt = {5};
  }
  std::span<const float> a = cpu.prefill(prompt), b = gpu.prefill(prompt);
  double worst = 0;
  for (int i = 0;; ++i) {
    worst = std::max(worst, test::normalized_error(b.data(), a.data(), a.size()));
    if (i == steps) break;
    const int32_t next = (int32_t)(std::max_element(a.begin(), a.end()) - a.begin());
    a = cpu.decode(next);
    b = gpu.decode(next);
  }
  return worst;
}

// A 64-token prompt: two 32-token passes (the second's head gives the prompt's logits), then decode
// steps whose attention spans two of a head's parts (64 rows each at n_ctx 256), merged.
TEST(Vulkan, RandomModelsOfEachArchitectureAndTypeGiveTheCpusLogitsAtEveryStep) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3"})
    for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0}) {
      const std::string path = test::temp_dir() + "/m.gguf";
      write_synthetic_model(tiny_shape(arch), type, path, 3);
      auto model = load_model(path);
      std::string why;
      auto device = on_device(*model, why);
      SKIP_WITHOUT_VULKAN(device, why);
      // F32/F16: the same float products in another order and the shader's exp (measured on lavapipe:
      // 1.5e-5 to 3e-5, qwen3's sharper normed scores 3e-4). Q8_0, Q4_0: the CPU rounds the
      // activations to int8 for its integer dot products, the device multiplies the weights by the
      // floats (Q8_0 1.0e-2 to 1.2e-2). A wrong op gives 0.1 and more.
      const double tolerance = type == DType::Q8_0 || type == DType::Q4_0 ? 3e-2 : 1e-3;
      EXPECT_LT(worst_logit_error(*model, {nullptr, nullptr}, {device.get(), nullptr}, 20, 64), tolerance) << arch << " " << dtype_name(type);
    }
}

TEST(Vulkan, TheEngineRunsOnTheDeviceWithMinusNgl) {
  std::string why;
  std::unique_ptr<Engine> engine = engine_on_device(FASA_BUNDLED_MODEL, why);
  SKIP_WITHOUT_VULKAN(engine, why);
  EXPECT_NE(engine->info().device.find("Vulkan0"), std::string::npos) << engine->info().device;
  Engine cpu(FASA_BUNDLED_MODEL);
  const std::string prompt = "In the beginning";
  std::string texts[2];
  GenerationOptions gen;
  gen.max_tokens = 24;
  for (int i = 0; i < 2; ++i) {
    Context ctx(i ? cpu : *engine, {});
    ctx.feed(prompt);
    texts[i] = ctx.generate(gen).text;
  }
  EXPECT_EQ(texts[0], texts[1]);
  // Policies other than full, FASA and Quest stay on the CPU in this version: refused by name.
  ContextOptions h2o;
  h2o.policy.attn = "h2o";
  EXPECT_NE(test::error_message([&] { Context(*engine, h2o); }).find("h2o runs on the CPU only"), std::string::npos);
  // FASA needs a profile file there (the automatic one is measured on the CPU), and the F16 cache.
  ContextOptions auto_fasa, q8_cache;
  auto_fasa.policy.attn = "fasa";
  q8_cache.policy.cache.types.k = DType::Q8_0;
  EXPECT_NE(test::error_message([&] { Context(*engine, auto_fasa); }).find("needs a profile"), std::string::npos);
  EXPECT_NE(test::error_message([&] { Context(*engine, q8_cache); }).find("F16 KV cache"), std::string::npos);
  // What the cache takes is reported where it is.
  Context ctx(*engine, {});
  ctx.feed(prompt);
  const KvMemory mem = ctx.kv_memory();
  EXPECT_EQ(mem.fast, 0u);
  EXPECT_EQ(mem.device, mem.full);  // full attention: K and V, no K_dom plane
  EXPECT_GT(mem.device, 0u);
  // A part of the layers is refused: all or none.
  EXPECT_NE(test::error_message([] { Engine(FASA_BUNDLED_MODEL, EngineOptions{.gpu_layers = 2}); }).find("-ngl 99"),
            std::string::npos);
}

// With every layer on the device the CPU holds no copy of the weights: nothing is packed for its
// kernels, and the file's pages the upload read are dropped (the CPU engine of the same Q4_0 file packs).
TEST(Vulkan, EveryLayerOnTheDeviceHoldsTheWeightsThereOnly) {
  const std::string path = test::temp_dir() + "/q4.gguf";
  write_synthetic_model(tiny_shape("llama"), DType::Q4_0, path, 3);
  std::string why;
  std::unique_ptr<Engine> gpu = engine_on_device(path, why);
  SKIP_WITHOUT_VULKAN(gpu, why);
  const Engine cpu(path);
  if (has_packed_rows(DType::Q4_0)) {
    EXPECT_GT(cpu.info().packed_weight_bytes, 0u);
  }
  EXPECT_GE(cpu.info().held_weight_bytes, cpu.info().weight_bytes);
  EXPECT_EQ(gpu->info().packed_weight_bytes, 0u);
  EXPECT_EQ(gpu->info().held_weight_bytes, 0u) << "of " << gpu->info().weight_bytes;
  // The device's weights are what it uploaded before the pages went: its logits stay the CPU's.
  Context on_gpu(*gpu, {}), on_cpu(cpu, {});
  for (Context* c : {&on_gpu, &on_cpu}) c->feed_tokens({1, 17, 42, 99, 7});
  const std::span<const float> a = on_cpu.logits(), b = on_gpu.logits();
  EXPECT_LT(test::normalized_error(b.data(), a.data(), a.size()), 3e-2);  // (int8 activations on the CPU)
}

// A random-weight F32 llama of tiny_shape and the same model on Vulkan device 0 (skipped without one).
class VulkanTinyLlama : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test::temp_dir() + "/m.gguf";
    write_synthetic_model(tiny_shape("llama"), DType::F32, path, 3);
    model = load_model(path);
    std::string why;
    device = on_device(*model, why);
    SKIP_WITHOUT_VULKAN(device, why);
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<DeviceModel> device;
};

// A policy that records, for one layer at the latest decode step, each query head's chosen rows and
// the TIP score of every row (recomputed here in double from the query and the cache's K_dom plane
// on the slots the head scores on); everything else is the wrapped policy's.
class RecordedRows final : public AttentionPolicy {
 public:
  RecordedRows(std::shared_ptr<AttentionPolicy> inner, const Model& model, int layer)
      : inner_(std::move(inner)), layer_(layer), selection_(*inner_->device_selection(model.config.n_layer)),
        n_head_(model.config.n_head) {}
  std::string_view name() const override { return inner_->name(); }
  void select(const AttentionQuery* queries, int n_q, const KvHeadView& kv, std::vector<int32_t>* rows,
              bool* sparse) override {
    inner_->select(queries, n_q, kv, rows, sparse);
    if (queries[0].layer != layer_) return;
    for (int i = 0; i < n_q; ++i) {
      const std::vector<int>& slots = selection_.scored[(size_t)layer_ * n_head_ + queries[i].q_head];
      Head head{rows[i], std::vector<double>(kv.n_tokens)};
      if (!sparse[i])
        for (int64_t r = 0; r < kv.n_tokens; ++r) head.rows.push_back((int32_t)r);
      for (int64_t r = 0; r < kv.n_tokens; ++r)
        for (int j : slots)
          head.scores[r] += (double)queries[i].q[j] * fp16_at(static_cast<const uint16_t*>(kv.k_dom_row(r)) + j);
      std::sort(head.rows.begin(), head.rows.end());
      std::lock_guard lock(mu_);
      heads_[queries[i].q_head] = std::move(head);
    }
  }
  KeyLayout key_layout(int layer, int kv_head) const override { return inner_->key_layout(layer, kv_head); }
  std::optional<DeviceSelection> device_selection(int n_layer) const override { return inner_->device_selection(n_layer); }

  struct Head {
    std::vector<int32_t> rows;  // ascending
    std::vector<double> scores;  // [n_tokens]
  };
  std::map<int, Head> heads_;  // by query head

 private:
  std::shared_ptr<AttentionPolicy> inner_;
  const int layer_;
  const DeviceSelection selection_;
  const int n_head_;
  std::mutex mu_;
};

// Decode steps on the CPU and on the device with the same tokens: each step, each query head's rows
// at the last layer (the sparse one) read back from the device equal the CPU's, but for rows whose
// TIP scores tie at the cut (within 1e-5 of the head's largest score: sums of the same products
// in another order may order them either way). Returns how many (step, head) sets were identical, of
// how many.
std::pair<int, int> compare_chosen_rows(const Model& model, const DeviceModel& device,
                                        std::function<std::shared_ptr<AttentionPolicy>()> make, int steps) {
  const int layer = model.config.n_layer - 1;
  auto recorded = std::make_shared<RecordedRows>(make(), model, layer);
  Session cpu(model, options_of({}), recorded);
  Session gpu(model, options_of({&device, nullptr}), make());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 120; ++i) prompt.push_back((int32_t)(i * 37 % 290 + 5));
  std::span<const float> logits = cpu.prefill(prompt);
  gpu.prefill(prompt);
  int same = 0, total = 0;
  for (int step = 0; step < steps; ++step) {
    const int32_t next = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = cpu.decode(next);
    gpu.decode(next);
    const std::vector<std::vector<int32_t>> chosen = gpu.device()->chosen_rows();
    EXPECT_EQ(chosen.size(), recorded->heads_.size());
    for (auto& [h, head] : recorded->heads_) {
      std::vector<int32_t> on_device = chosen.at(h);
      std::sort(on_device.begin(), on_device.end());
      ++total;
      if (on_device == head.rows) {
        ++same;
        continue;
      }
      EXPECT_EQ(on_device.size(), head.rows.size()) << "step " << step << " head " << h;
      std::vector<int32_t> differ;
      std::set_symmetric_difference(on_device.begin(), on_device.end(), head.rows.begin(), head.rows.end(),
                                    std::back_inserter(differ));
      double lo = INFINITY, hi = -INFINITY, largest = 0;
      for (int32_t r : differ) lo = std::min(lo, head.scores.at(r)), hi = std::max(hi, head.scores.at(r));
      for (double s : head.scores) largest = std::max(largest, std::abs(s));
      EXPECT_LE(hi - lo, 1e-5 * largest) << "step " << step << " head " << h << ": " << differ.size() << " rows differ";
    }
  }
  return {same, total};
}

// FASA on the device selects the rows the CPU's FASA selects: read back, they are the CPU's but for
// near-ties; the logits agree as closely as full attention's do across the two (1e-3), where full and
// FASA differ by far more; at a budget covering
// the context the device's FASA is its dense attention, exactly. Per-head and group chunk sets, with
// sink and recent rows forced in (the defaults held to half the budget among them) and without.
TEST_F(VulkanTinyLlama, FasaSelectsOnTheDeviceAsOnTheCpu) {
  const Profile profile = synthetic_profile(*model, 3, 11);
  auto fasa = [&](PolicyOptions o) -> std::shared_ptr<AttentionPolicy> { return make_fasa_policy_from(profile, o, *model); };
  for (FcSharing sharing : {FcSharing::Group, FcSharing::Head})
    for (auto [sink, recent] : {std::pair{0, 0}, {4, 8}, {-1, -1}}) {  // (-1: the defaults, 1 + 15 held to 1 + 11 of 24)
      PolicyOptions o;
      o.budget = Budget::count(24);
      o.fc_sharing = sharing;
      o.sink = sink;
      o.recent = recent;
      const std::string what = std::string(sharing == FcSharing::Group ? "group" : "head") + " sink " +
                               std::to_string(sink) + " recent " + std::to_string(recent);
      EXPECT_LT(worst_logit_error(*model, {nullptr, fasa(o)}, {device.get(), fasa(o)}, 12, 120), 1e-3) << what;
      const auto [same, total] = compare_chosen_rows(*model, *device, [&] { return fasa(o); }, 12);
      EXPECT_GE(same, total * 9 / 10) << what;  // (near-ties at the cut are rare)
      // Random rows filled on the device (bench's --fill random) are the CPU's: the same selections.
      EXPECT_LT(worst_logit_error(*model, {nullptr, fasa(o)}, {device.get(), fasa(o)}, 4, 112, true), 1e-3) << what;
      // FASA-M: the same rows read from host memory, the same arithmetic.
      EXPECT_EQ(worst_logit_error(*model, {device.get(), fasa(o)}, {device.get(), fasa(o), true}, 8, 120), 0.0) << what;
      // (the same comparison's power: FASA at 24 rows against full attention, both on the CPU)
      EXPECT_GT(worst_logit_error(*model, {nullptr, fasa(o)}, {nullptr, nullptr}, 12, 120), 1e-2) << what;
    }
  // FASA-M holds the sparse layer's K and V in host memory, and reads there only the chosen rows.
  PolicyOptions o;
  o.budget = Budget::count(24);
  Session m(*model, options_of({device.get(), nullptr, true}), fasa(o));
  Session c(*model, options_of({device.get(), nullptr, false}), fasa(o));
  for (Session* s : {&m, &c}) test::greedy_tokens(*s, std::vector<int32_t>(60, 5), 4);
  const size_t kv = (size_t)2 * 2 * 16 * 256 * 2;  // a layer's F16 K and V: 2 KV heads x 16 dims x 256 positions
  EXPECT_EQ(m.device()->host_kv_bytes(), kv);  // layer 1's (layer 0 is dense)
  EXPECT_EQ(m.device()->kv_bytes() + kv, c.device()->kv_bytes());
  EXPECT_EQ(m.device()->host_read_bytes(), (uint64_t)3 * 24 * 4 * 16 * 2 * 2);  // 3 steps x 24 rows x 4 heads x K and V
  EXPECT_EQ(c.device()->host_read_bytes(), 0u);
  PolicyOptions all;
  all.budget = Budget::count(1000);
  EXPECT_EQ(worst_logit_error(*model, {device.get(), nullptr}, {device.get(), fasa(all)}, 8, 80), 0.0);
}

// Quest on the device picks the CPU's pages: the newest token's page and the pages with the best
// bounds, within budgets of part of a page, one and a half and several pages.
TEST_F(VulkanTinyLlama, QuestSelectsOnTheDeviceAsOnTheCpu) {
  for (int budget : {10, 24, 56}) {
    PolicyOptions o;
    o.attn = "quest";
    o.budget = Budget::count(budget);
    auto quest = [&]() -> std::shared_ptr<AttentionPolicy> { return make_policy(o, *model, nullptr); };
    EXPECT_LT(worst_logit_error(*model, {nullptr, quest()}, {device.get(), quest()}, 12, 80), 1e-3) << budget;
    EXPECT_GT(worst_logit_error(*model, {nullptr, quest()}, {nullptr, nullptr}, 12, 80), 1e-2) << budget;
    // Random rows filled on the device: its pages' bounds made from them.
    EXPECT_LT(worst_logit_error(*model, {nullptr, quest()}, {device.get(), quest()}, 4, 96, true), 1e-3) << budget;
  }
  // Truncated into a page, the page's bounds hold only the keys written since: as a fresh session's.
  PolicyOptions o;
  o.attn = "quest";
  o.budget = Budget::count(24);
  std::vector<int32_t> x(90), y(40);  // (y: a 32-token pass from position 70, within a page)
  for (int i = 0; i < 90; ++i) x[i] = i * 37 % 290 + 5;
  for (int i = 0; i < 40; ++i) y[i] = i * 11 % 290 + 3;
  Session cut(*model, options_of({device.get(), nullptr, false}), make_policy(o, *model, nullptr));
  Session fresh(*model, options_of({device.get(), nullptr, false}), make_policy(o, *model, nullptr));
  cut.prefill(x);
  cut.truncate(70);
  cut.prefill(y);
  std::vector<int32_t> xy(x.begin(), x.begin() + 70);
  xy.insert(xy.end(), y.begin(), y.end());
  fresh.prefill(xy);
  for (int32_t t : {9, 99, 199}) {
    const std::span<const float> after_cut = cut.decode(t);
    const std::vector<float> a(after_cut.begin(), after_cut.end());
    EXPECT_EQ(test::normalized_error(a.data(), fresh.decode(t).data(), a.size()), 0.0) << t;
  }
}

// Refused before any device is opened, naming the file and what is missing.
TEST(Vulkan, WhatTheDeviceDoesNotRunIsRefusedByName) {
  ModelShape moe = tiny_shape("qwen3moe");
  moe.n_expert = 4, moe.n_expert_used = 2, moe.n_ff_exp = 32;
  const std::string path = test::temp_dir() + "/moe.gguf";
  write_synthetic_model(moe, DType::F16, path, 3);
  std::string why;
  EXPECT_EQ(on_device(*load_model(path), why), nullptr);
#ifdef FASA_HAS_VULKAN
  EXPECT_NE(why.find("mixtures of experts (qwen3moe) do not run on the device yet"), std::string::npos) << why;
#endif
  EXPECT_NE(why.find(path), std::string::npos) << why;
  // A weight type without a shader (kjv-tiny's Q5_K_M file holds Q5_K matrices).
  FASA_REQUIRE_SHARED();
  const std::string q5 = test::shared_dir() + "/models/kjv-tiny/quant/kjv-tiny-Q5_K_M.gguf";
  EXPECT_EQ(on_device(*load_model(q5), why), nullptr);
#ifdef FASA_HAS_VULKAN
  EXPECT_NE(why.find("Q5_K weights are not on the device yet"), std::string::npos) << why;
#endif
}

#ifdef FASA_HAS_VULKAN
// Random rows of `type`: F32/F16 of normal values; quantized blocks of random bytes whose f16 scales
// are small and finite (the rest of a block may be any bits: every quant value is valid).
std::vector<uint8_t> random_rows(DType type, int rows, int cols) {
  std::mt19937 rng(5);
  const DTypeTraits& traits = *dtype_traits((uint32_t)type);
  std::vector<uint8_t> w((size_t)rows * cols / traits.block * traits.block_bytes);
  for (uint8_t& b : w) b = (uint8_t)rng();
  const std::vector<float> wf = test::random_floats((size_t)rows * cols, 9);
  auto put_half = [&](size_t at, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(&w[at], &h, 2);
  };
  auto scale = [&] { return 0.001f + 0.001f * (float)(rng() % 50); };
  for (size_t i = 0; i < wf.size(); ++i) {
    if (type == DType::F32) std::memcpy(&w[4 * i], &wf[i], 4);
    if (type == DType::F16) put_half(2 * i, wf[i]);
  }
  for (size_t at = 0; at < w.size(); at += traits.block_bytes) {
    if (type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q5_0) put_half(at, scale());
    if (type == DType::Q4_K) put_half(at, scale()), put_half(at + 2, scale());  // d, dmin
    if (type == DType::Q6_K) put_half(at + 208, scale());
  }
  return w;
}

// y = W x for `tokens` columns x (matvec) and row `cols % rows` of W (get_row) on the device for W of
// `type`, against the dequantized rows on the CPU (the dot product in double): the larger normalised
// error of the two.
double matvec_error(gpu::VulkanDevice& dev, DType type, int rows, int cols, int tokens) {
  const std::vector<uint8_t> w = random_rows(type, rows, cols);
  const std::vector<float> x = test::random_floats((size_t)tokens * cols, 4);  // [tokens, cols]
  const int32_t token = cols % rows;
  int32_t step[4 * 32] = {token};  // shaders/step.glsl's headers: the token get_row reads
  gpu::Buffer wb = dev.buffer(w.size(), false, "w"), xb = dev.buffer(x.size() * 4, false, "x"),
              yb = dev.buffer((size_t)tokens * rows * 4, true, "y"), sb = dev.buffer(sizeof step, true, "step"),
              eb = dev.buffer((size_t)cols * 4, true, "row");
  dev.upload(wb, w.data(), w.size());
  dev.upload(xb, x.data(), x.size() * 4);
  dev.upload(sb, step, sizeof step);
  std::string type_name;  // the shaders' suffix: "q4_k"
  for (const char* c = dtype_name(type); *c; ++c) type_name += (char)std::tolower((unsigned char)*c);
  auto rec = dev.record();
  struct { uint32_t rows, cols, accumulate, tokens; } push{(uint32_t)rows, (uint32_t)cols, 0, (uint32_t)tokens};
  rec->dispatch(dev.pipeline("matvec_" + type_name, 3), {&wb, &xb, &yb}, push, (uint32_t)rows, (tokens + 7) / 8);
  struct { uint32_t cols; float scale; } row_push{(uint32_t)cols, 1.0f};
  rec->dispatch(dev.pipeline("get_row_" + type_name, 3), {&wb, &sb, &eb}, row_push, (uint32_t)(cols + 63) / 64);
  dev.finish(*rec);
  dev.run({rec.get()});
  const size_t row_bytes = w.size() / rows;
  std::vector<float> want((size_t)tokens * rows), row(cols);  // [tokens, rows]
  for (int r = 0; r < rows; ++r) {
    dequantize_row(type, &w[(size_t)r * row_bytes], row.data(), cols);
    for (int t = 0; t < tokens; ++t) {
      double s = 0;
      for (int i = 0; i < cols; ++i) s += (double)row[i] * x[(size_t)t * cols + i];
      want[(size_t)t * rows + r] = (float)s;
    }
  }
  dequantize_row(type, &w[(size_t)token * row_bytes], row.data(), cols);
  return std::max(test::normalized_error(static_cast<const float*>(yb.mapped()), want.data(), want.size()),
                  test::normalized_error(static_cast<const float*>(eb.mapped()), row.data(), cols));
}

TEST(Vulkan, TheBundledModelGeneratesTheCpusGreedyTextOneSubmitPerPass) {
  const std::string path = FASA_BUNDLED_MODEL;
  auto model = load_model(path);
  std::string why;
  auto device = on_device(*model, why);
  SKIP_WITHOUT_VULKAN(device, why);
  // Longer than one of the prompt's 32-token passes.
  const std::vector<int32_t> prompt = model->tokenizer.encode(
      "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
      "divided the light from the darkness. And God called the light Day, and the darkness he called Night.", true);
  ASSERT_GT(prompt.size(), 33u);
  SessionOptions so;
  so.n_ctx = 256;
  Session cpu(*model, so);
  so.device = device.get();
  Session gpu(*model, so);
  const auto& vk = static_cast<const gpu::VulkanModel&>(*device).device;
  const int64_t before = vk.submits();
  const int n = 48;
  EXPECT_EQ(test::greedy_tokens(gpu, prompt, n), test::greedy_tokens(cpu, prompt, n));
  // Each pass is one submit: no op went back to the CPU in between. The prompt's tokens go 32 at a
  // time, the rest one by one.
  const int64_t p = (int64_t)prompt.size();
  EXPECT_EQ(vk.submits() - before, p / 32 + p % 32 + (n - 1));
  EXPECT_EQ(gpu.cache().n_ctx(), 1) << "the CPU holds no KV cache for a session on the device";
}

// Vulkan device 0 alone, for single shaders (skipped without one).
class VulkanShader : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    try {
      dev = std::make_unique<gpu::VulkanDevice>(0);
    } catch (const Error& e) {
      why = e.what();
    }
    SKIP_WITHOUT_VULKAN(dev, why);
  }
  std::unique_ptr<gpu::VulkanDevice> dev;
};

TEST_F(VulkanShader, MatvecAndEmbeddingRowsOfEachTypeMatchTheDequantizedRows) {
  // Rows beyond one dispatch's 65535 workgroups loop; columns not a multiple of the 64 threads; one
  // token (a decode step), and 11 (a prompt's: a whole tile of 8 and a part of one).
  // Every type whose traits row names its shaders, so a type added there is checked here.
  struct Case { int rows, cols, tokens; };
  int types = 0;
  for (uint32_t raw = 0; raw < 64; ++raw) {
    const DTypeTraits* tr = dtype_traits(raw);
    if (!tr || !tr->gpu_shader) continue;
    const int block = std::max(tr->block, 32);  // rows of whole blocks (256-element super-blocks)
    for (Case c : {Case{7, 3 * block, 11}, {66000, block, 1}, {33, 4096, 1}})
      EXPECT_LT(matvec_error(*dev, tr->type, c.rows, c.cols, c.tokens), 1e-6) << tr->name << " " << c.rows << "x" << c.cols;
    ++types;
  }
  EXPECT_EQ(types, 7);  // F32, F16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K
}

// select_rows on scores full of ties (i % 3 over 200 rows, so each thread's run of rows holds some):
// the rows above the cut, then the lowest rows at it, in row order, after the sink and recent rows.
TEST_F(VulkanShader, SelectRowsTakesTheLowestTiedRowsInRowOrder) {
  const int n = 200, sink = 2, recent = 3, budget = 105;
  std::vector<float> scores(n);
  for (int i = 0; i < n; ++i) scores[i] = (float)(i % 3);
  int32_t step[4 * 32] = {0, n - 1, budget};  // shaders/step.glsl: token, position, budget
  gpu::Buffer sb = dev->buffer(sizeof step, true, "step"), scores_b = dev->buffer(n * 4, true, "scores"),
              rows_b = dev->buffer(n * 4, true, "rows"), count_b = dev->buffer(4, true, "count");
  dev->upload(sb, step, sizeof step);
  dev->upload(scores_b, scores.data(), n * 4);
  auto rec = dev->record();
  struct { uint32_t n_ctx, sink, recent; } push{n, sink, recent};
  rec->dispatch(dev->pipeline("select_rows", 4), {&scores_b, &sb, &rows_b, &count_b}, push, 1);
  dev->finish(*rec);
  dev->run({rec.get()});
  std::vector<uint32_t> want = {0, 1, 197, 198, 199};  // the sink rows, the recent rows
  std::vector<uint32_t> top, ties;                     // of rows 2..196: scores 2, then the lowest 1s
  for (uint32_t i = sink; i < n - recent; ++i) (i % 3 == 2 ? top : ties).push_back(i);
  std::erase_if(ties, [](uint32_t i) { return i % 3 != 1; });
  ties.resize(budget - sink - recent - top.size());
  std::merge(top.begin(), top.end(), ties.begin(), ties.end(), std::back_inserter(want));
  const uint32_t* rows = static_cast<const uint32_t*>(rows_b.mapped());
  ASSERT_EQ(*static_cast<const uint32_t*>(count_b.mapped()), (uint32_t)budget);
  EXPECT_EQ(std::vector<uint32_t>(rows, rows + budget), want);
}
#endif

}  // namespace
}  // namespace fasa
