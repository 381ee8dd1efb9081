// The retrieval models (recipe: tools/train/): models/kjv-recall-f16.gguf (4K, the default) and
// models/kjv-recall-16k-f16.gguf (16K, 4 query heads per KV head). The engine reproduces the training
// code's own forward pass of each, and they keep retrieving from long context with full attention and
// with FASA at 1/8 of the context (at 1/32 within 90 % of full at 4K and among look-alike needles; the
// 16K model at 8K with 256 tokens), so a change that breaks long-range selection fails here.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "calib/calibrate.h"
#include "eval/retrieval.h"
#include "eval/task_gen.h"
#include "model/sampler.h"
#include "model/session.h"
#include "test_util.h"

namespace fasa {
namespace {

const std::string kModel = FASA_BUNDLED_MODEL;
const std::string kModel16k = std::string(FASA_SOURCE_DIR) + "/models/kjv-recall-16k-f16.gguf";

// The logits of the golden prompts' last positions within 1e-4 (max|diff| / max|ref|; issue 41) of the
// training code's float32 forward pass of the F16-rounded weights, and its greedy continuations token
// for token. Measured (2026-11-26): 2e-6 to 4e-6 on short prompts, 2e-5 on the 3758-token one.
void expect_matches_golden(const std::string& model, const std::string& golden) {
  auto j = nlohmann::json::parse(test::read_file(golden + "/golden.json"));
  auto m = load_model(model);
  const size_t V = m->config.n_vocab;
  ASSERT_EQ((size_t)j["vocab"].get<int>(), V);
  for (const auto& c : j["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(m->tokenizer.encode(c["prompt"].get<std::string>(), true), ids);
    const std::string raw = test::read_file(golden + "/" + c["logits"].get<std::string>());
    const size_t last = c["last_positions"].get<size_t>();
    ASSERT_EQ(raw.size(), last * V * 4);
    std::vector<float> ref(last * V);
    std::memcpy(ref.data(), raw.data(), raw.size());
    SessionOptions o;
    o.cache.types = {DType::F32, DType::F32};  // the reference is a float32 run of the F16-rounded weights
    Session s(*m, o);
    std::vector<float> logits;
    s.prefill(ids, &logits);
    double worst = 0;
    for (size_t t = 0; t < last; ++t)
      worst = std::max(worst, test::normalized_error(&logits[(ids.size() - last + t) * V], &ref[t * V], V));
    std::printf("%zu-token prompt: normalised logit error %.2e\n", ids.size(), worst);
    EXPECT_LE(worst, 1e-4) << ids.size() << "-token prompt";
    std::vector<int32_t> got;
    std::span<const float> next_logits(logits.end() - V, logits.end());
    const auto greedy = c["greedy"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < greedy.size(); ++i) {
      got.push_back(argmax(next_logits));
      next_logits = s.decode(got.back());
    }
    EXPECT_EQ(got, greedy);
  }
}

TEST(TrainedModel, MatchesTheTrainingCodesForwardPass) {
  expect_matches_golden(kModel, std::string(FASA_SOURCE_DIR) + "/tests/golden/kjv-recall");
}

TEST(TrainedModel, LongContextModelMatchesTheTrainingCodesForwardPass) {  // with one prompt of 3758 tokens
  expect_matches_golden(kModel16k, std::string(FASA_SOURCE_DIR) + "/tests/golden/kjv-recall-16k");
}

// Measured on run12 with multivalue scored by the share of its values (2026-11-25, again 2026-11-27): full
// 0.93, fasa 0.93, stream 0.02 (20 tasks, steps of 0.05, multivalue's of 1/60). Floors leave a task or two
// of room for kernel-order changes, not for a broken selection; FASA's is relative to full attention's.
constexpr double kFullFloor = 0.85, kStreamCeiling = 0.25;
constexpr double kFasaSlack = 0.1 + 1e-9;  // FASA >= full - this: two tasks of 20, one of 10 (0.8 - 0.1 < 0.7)
// The floors relative to full (the test below), measured on run12 (2026-11-26): at 4K full 0.77, fasa
// 0.77, quest 0.77; among look-alikes at 2K full 0.47, fasa 0.47, quest 0.03 (FASA with 8 chunks; with
// its defaults since the chunk choice, 2026-11-26: 0.77 at 4K and 0.43 among look-alikes).
constexpr double kFull4kFloor = 0.7, kLookAlikeFullFloor = 0.4, kLookAlikeQuestCeiling = 0.2;
// The 16K model at 8K (the last test): full 0.90, FASA with its defaults 0.90 (2026-12-07).
constexpr double kFull8kFloor = 0.8;

// The accuracy of `policy` on `type`, of the variant whose description begins with `variant` and does
// not begin with `other` (where given).
double accuracy(const std::vector<EvalRecord>& r, const std::string& policy, const std::string& type = "all",
                const std::string& variant = "", const std::string& other = "") {
  for (auto& x : r)
    if (x.policy == policy && x.metric == "accuracy" && x.task_type == type && x.variant.rfind(variant, 0) == 0 &&
        (other.empty() || x.variant.rfind(other, 0) != 0))
      return x.value;
  ADD_FAILURE() << "no record for " << policy << " " << type << " " << variant;
  return 0;
}

// FASA's options (the profile's chunk choice) with a profile of the bundled 4K model calibrated on five
// generated 1024-token prompts (seed 99), made once.
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
  return po;
}

// 20 generated 1024-token tasks (4 of each kind, seed fixed): full attention and FASA at a budget of
// 1/8 (128 tokens, the profile's chosen chunks, profile calibrated here on other generated prompts) above floors
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
  EXPECT_GE(fasa, full - kFasaSlack);
  EXPECT_LE(stream, kStreamCeiling);
}

// Issue 41's floors relative to full attention: ten 4096-token tasks (two per kind, noise haystack) and
// ten 2048-token tasks among look-alike needles (every haystack line a needle of the asked template with
// other keys and values). FASA at 1/32 keeps full attention's score in both but for one task of slack (it
// equals full at 4K as measured, one task below among look-alikes); Quest, whose page bounds cannot tell look-alike lines
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
    EXPECT_GE(fasa, full - kFasaSlack) << type;
    if (type == "all@2048") {
      EXPECT_LE(quest, kLookAlikeQuestCeiling);
    }
  }
}

// The 16K model (4 query heads per KV head) with FASA's defaults only, as a user gets them: the chunk
// choice of a profile calibrated on ordinary text (`fasa calibrate -f ../shared/eval/calibration.txt`,
// not the tasks' kind of prompt), and the automatic profile (measured on the first prompt): ten
// 8192-token tasks (two per kind) at 256 tokens (1/32), each within one task of full attention's score.
// Measured (2026-12-07): full 0.90, both 0.90. With the chunk choice planted out of calibration (the
// paper's fixed 8 chunks ranked by agreement) the offline profile's FASA falls to 0.43 and fails; a
// profile calibrated on generated prompts, as this test had before, did not tell the two apart.
// (Each test process has its own cache dir: test_util.cpp.)
TEST(TrainedModel, LongContextModelKeepsFasaWithFullAt8KWithDefaults) {
  FASA_REQUIRE_SHARED();
  auto m = load_model(kModel16k);
  TaskGenOptions g;
  g.lengths = {8192};
  g.n = 2;
  g.seed = 5;
  const auto tasks = generate_retrieval_tasks(m->tokenizer, g);
  PolicyOptions calibrated;
  calibrated.profile = test::temp_dir() + "/recall-16k-text.profile.json";
  save_profile(calibrate(*m, test::read_file(test::shared_dir() + "/eval/calibration.txt"), "calibration.txt", {}),
               calibrated.profile);
  const auto r = eval_retrieval(*m, tasks, {"full", "fasa", "fasa:profile=auto"}, {"256"}, calibrated);
  const double full = accuracy(r, "full"), offline = accuracy(r, "fasa", "all", "", "profile=auto"),
               automatic = accuracy(r, "fasa", "all", "profile=auto");
  std::printf("generated 8192-token tasks: full %.2f, fasa@256 with defaults %.2f (offline profile), %.2f (automatic)\n",
              full, offline, automatic);
  EXPECT_GE(full, kFull8kFloor);
  EXPECT_GE(offline, full - kFasaSlack);
  EXPECT_GE(automatic, full - kFasaSlack);
}

}  // namespace
}  // namespace fasa
