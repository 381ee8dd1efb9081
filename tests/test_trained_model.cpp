// The retrieval model models/kjv-recall-f16.gguf (recipe: tools/train/): the engine reproduces the training code's own forward
// pass, and the model keeps retrieving from long context with full attention and with FASA at 1/8 of
// the context (and at 1/32 within 90 % of full at 4K and among look-alike needles), so a change that
// breaks long-range selection fails here.
#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "eval/retrieval.h"
#include "eval/task_gen.h"
#include "model/sampler.h"
#include "model/session.h"
#include "test_util.h"

namespace fasa {
namespace {

const std::string kGolden = std::string(FASA_SOURCE_DIR) + "/tests/golden/kjv-recall";
const std::string kModel = FASA_BUNDLED_MODEL;

TEST(TrainedModel, MatchesTheTrainingCodesForwardPass) {
  auto j = nlohmann::json::parse(test::read_file(kGolden + "/golden.json"));
  auto m = load_model(kModel);
  const size_t V = m->config.n_vocab;
  ASSERT_EQ((size_t)j["vocab"].get<int>(), V);
  for (const auto& c : j["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(m->tokenizer.encode(c["prompt"].get<std::string>(), true), ids);
    const std::string raw = test::read_file(kGolden + "/" + c["logits"].get<std::string>());
    const size_t last = c["last_positions"].get<size_t>();
    ASSERT_EQ(raw.size(), last * V * 4);
    std::vector<float> ref(last * V);
    std::memcpy(ref.data(), raw.data(), raw.size());
    SessionOptions o;
    o.kv_types = {DType::F32, DType::F32};  // the reference is a float32 run of the F16-rounded weights
    Session s(*m, o);
    std::vector<float> logits;
    s.eval(ids, &logits);
    for (size_t t = 0; t < last; ++t)  // the tolerance for F16 weights: max|diff| / max|ref| <= 2e-3
      EXPECT_LE(test::normalized_error(&logits[(ids.size() - last + t) * V], &ref[t * V], V), 2e-3) << t;
    std::vector<int32_t> got;
    std::span<const float> next_logits(logits.end() - V, logits.end());
    const auto greedy = c["greedy"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < greedy.size(); ++i) {
      got.push_back(argmax(next_logits));
      next_logits = s.eval(std::span<const int32_t>(&got.back(), 1));
    }
    EXPECT_EQ(got, greedy);
  }
}

// Measured on run12 with multivalue scored by the share of its values (2026-11-25): full 0.93, fasa 0.93,
// stream 0.02 (20 tasks, steps of 0.05, multivalue's of 1/60). Floors leave room for kernel-order
// changes, not for a broken selection.
constexpr double kFullFloor = 0.75, kFasaFloor = 0.75, kStreamCeiling = 0.25;
// The floors relative to full (the test below), measured on run12 (2026-11-26): at 4K full 0.77, fasa
// 0.77, quest 0.77; among look-alikes at 2K full 0.47, fasa 0.47, quest 0.03.
constexpr double kFull4kFloor = 0.6, kLookAlikeFullFloor = 0.3, kLookAlikeQuestCeiling = 0.2;

double accuracy(const std::vector<EvalRecord>& r, const std::string& policy, const std::string& type = "all") {
  for (auto& x : r)
    if (x.policy == policy && x.metric == "accuracy" && x.task_type == type) return x.value;
  ADD_FAILURE() << "no record for " << policy << " " << type;
  return 0;
}

// FASA's options with a profile calibrated on five generated 1024-token prompts (seed 99), made once.
PolicyOptions calibrated_fasa(const Model& m) {
  static const std::string profile = [&] {
    TaskGenOptions g;
    g.lengths = {1024};
    g.n = 1;
    g.seed = 99;
    std::string calib_text;
    for (const auto& t : generate_retrieval_tasks(m.tokenizer, g)) calib_text += t.prompt + "\n";
    CalibrationOptions co;
    co.n_ctx = 1024;
    const std::string path = test::temp_dir() + "/recall.profile.json";
    save_profile(calibrate(m, calib_text, "generated", co), path);
    return path;
  }();
  PolicyOptions po;
  po.profile = profile;
  po.fcs = 8;
  return po;
}

// 20 generated 1024-token tasks (4 of each kind, seed fixed): full attention and FASA at a budget of
// 1/8 (128 tokens, 8 of 32 chunks, profile calibrated here on other generated prompts) above floors
// set below what was measured when the model was exported, and StreamingLLM far below.
TEST(TrainedModel, RetrievesAtLongRangeWithFullAttentionAndFasa) {
  auto m = load_model(kModel);
  TaskGenOptions g;
  g.lengths = {1024};
  g.n = 4;
  g.seed = 7;
  const auto tasks = generate_retrieval_tasks(m->tokenizer, g);
  const auto r = eval_retrieval(*m, tasks, {"full", "fasa", "stream"}, {"0.125"}, calibrated_fasa(*m));
  const double full = accuracy(r, "full"), fasa = accuracy(r, "fasa"), stream = accuracy(r, "stream");
  std::printf("generated 1024-token tasks: full %.2f, fasa@1/8 %.2f, stream@1/8 %.2f\n", full, fasa, stream);
  EXPECT_GE(full, kFullFloor);
  EXPECT_GE(fasa, kFasaFloor);
  EXPECT_LE(stream, kStreamCeiling);
}

// Issue 41's floors relative to full attention: ten 4096-token tasks (two per kind, noise haystack) and
// ten 2048-token tasks among look-alike needles (every haystack line a needle of the asked template with
// other keys and values). FASA at 1/32 keeps at least 90 % of full attention's score in both, less one
// task of slack (it equals full as measured); Quest, whose page bounds cannot tell look-alike lines
// apart, falls far below among them.
TEST(TrainedModel, FasaKeepsUpWithFullAt4KAndAmongLookAlikeNeedles) {
  auto m = load_model(kModel);
  TaskGenOptions g;
  g.lengths = {4096};
  g.n = 2;
  g.seed = 3;
  auto tasks = generate_retrieval_tasks(m->tokenizer, g);
  g.lengths = {2048};
  g.distractors = true;
  for (auto& t : generate_retrieval_tasks(m->tokenizer, g)) tasks.push_back(std::move(t));
  const auto r = eval_retrieval(*m, tasks, {"full", "fasa", "quest"}, {"0.03125"}, calibrated_fasa(*m));
  for (const std::string type : {"all@4096", "all@2048"}) {
    const double full = accuracy(r, "full", type), fasa = accuracy(r, "fasa", type), quest = accuracy(r, "quest", type);
    std::printf("%s%s: full %.2f, fasa@1/32 %.2f, quest@1/32 %.2f\n", type.c_str(),
                type == "all@2048" ? " among look-alikes" : "", full, fasa, quest);
    EXPECT_GE(full, type == "all@4096" ? kFull4kFloor : kLookAlikeFullFloor) << type;
    EXPECT_GE(fasa, 0.9 * full - 0.1) << type;
    if (type == "all@2048") {
      EXPECT_LE(quest, kLookAlikeQuestCeiling);
    }
  }
}

}  // namespace
}  // namespace fasa
