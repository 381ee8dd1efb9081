// The settings' one parser (set_policy_option): typed results, and errors that name the setting.
#include <gtest/gtest.h>

#include "fasa/error.h"
#include "fasa/options.h"
#include "test_util.h"
#include "util/options_text.h"

namespace fasa {
namespace {

TEST(Options, BudgetCountsAndSharesAreWrittenApart) {
  EXPECT_EQ(Budget::parse("256"), Budget::count(256));
  EXPECT_EQ(Budget::parse("1"), Budget::count(1));  // one token, not the whole context
  EXPECT_EQ(Budget::parse("1.0"), Budget::share(1));
  EXPECT_EQ(Budget::parse("0.25"), Budget::share(0.25));
  EXPECT_EQ(Budget::parse("50%"), Budget::share(0.5));
  EXPECT_EQ(Budget::parse("100%"), Budget::share(1));
  EXPECT_EQ(Budget::parse("1e-05"), Budget::share(1e-5));  // as a JSON float prints
  EXPECT_EQ(Budget::parse("0.25").tokens(100), 25);
  EXPECT_EQ(Budget::parse("1.0").tokens(100), 100);
  EXPECT_EQ(Budget::parse("256").tokens(100), 256);
  for (const char* bad : {"0", "-4", "abc", "", "2.5", "101%", "0%", "%", "1e3", "3.7e12", "nan", "256 "})
    EXPECT_EQ(test::error_message([&] { Budget::parse(bad); }).rfind("budget: ", 0), 0u) << bad;
  EXPECT_EQ(test::error_message([] { Budget::parse("2.5"); }),
            "budget: a share of the context must be at most 1 (100%); a token count has no decimal point, got '2.5'");
  for (const Budget& b : {Budget::count(256), Budget::share(0.125), Budget::share(1), Budget::share(1e-7),
                          Budget::share(0.1234567891)})
    EXPECT_EQ(Budget::parse(b.str()), b) << b.str();
  EXPECT_EQ(Budget::count(256).describe(), "256 tokens");  // what run headers say: no count read as a share
  EXPECT_EQ(Budget::count(1).describe(), "1 token");
  EXPECT_EQ(Budget::share(0.125).describe(), "12.5% of the context");
  EXPECT_EQ(Budget::share(1).describe(), "100% of the context");
  EXPECT_EQ(Budget::parse("0.07").describe(), "7% of the context");  // not 7.000000000000001%
}

TEST(Options, EachSettingParsesToItsType) {
  PolicyOptions o;
  set_policy_option(o, "attn", "fasa");
  set_policy_option(o, "budget", "0.5");
  set_policy_option(o, "fcs", "8");
  set_policy_option(o, "fc_sharing", "head");
  set_policy_option(o, "fc_alloc", "adaptive");
  set_policy_option(o, "fc_rank", "magnitude");
  set_policy_option(o, "dense_layers", "0,2");
  set_policy_option(o, "sink", "4");
  set_policy_option(o, "tip_mass", "0.95");
  set_policy_option(o, "seed_policy", "7");
  set_policy_option(o, "ds_channels", "12");
  set_policy_option(o, "kv_type", "q8_0");
  set_policy_option(o, "cache_type_v", "f32");
  set_policy_option(o, "tip_int8", "true");
  set_policy_option(o, "kv_offload", "file:/tmp/x");
  set_policy_option(o, "kv_fast_limit", "512M");
  set_policy_option(o, "kv_prefetch", "on");
  PolicyOptions want;
  want.attn = "fasa";
  want.budget = Budget::share(0.5);
  want.fcs = 8;
  want.fc_sharing = FcSharing::Head;
  want.fc_alloc = FcAlloc::Adaptive;
  want.fc_rank = FcRank::Magnitude;
  want.dense_layers = {0, 2};
  want.sink = 4;
  want.tip_mass = 0.95;
  want.seed = 7;
  want.ds_channels = 12;
  want.cache.types.k = DType::Q8_0;
  want.cache.types.v = DType::F32;
  want.cache.types.tip_int8 = true;
  want.cache.offload = {KvOffloadOptions::Tier::File, "/tmp/x", 512u << 20, true};
  EXPECT_EQ(o, want);
  set_policy_option(o, "dense_layers", "");
  EXPECT_TRUE(o.dense_layers.empty());
  EXPECT_EQ(layer_list_str({0, 2}), "0,2");
  EXPECT_EQ(offload_str(want.cache.offload), "file:/tmp/x");
  const std::vector<std::string> names = {"attn", "budget", "cache_type_k", "cache_type_v", "dense_layers", "ds_channels", "fc_alloc",
                                          "fc_rank", "fc_sharing", "fcs", "kv_fast_limit", "kv_offload", "kv_prefetch", "kv_type",
                                          "profile", "recent", "seed_policy", "sink", "snapkv_every", "snapkv_window",
                                          "sparq_r", "synthetic_profile", "tip_int8", "tip_mass"};
  EXPECT_EQ(policy_option_names(), names);
}

TEST(Options, MistakesNameTheSettingNotAFlag) {
  PolicyOptions o;
  const PolicyOptions before = o;
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "fc_sharing", "both"); }),
            "fc_sharing: must be 'head' or 'group', got 'both'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "kv_type", "q4_0"); }),
            "kv_type: must be 'f16' or 'f32' or 'q8_0', got 'q4_0'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "fcs", "0"); }), "fcs: must be a whole number from 1 to 512, got '0'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "dense_layers", "0,x"); }),
            "dense_layers: must be a whole number from 0 to 1048576, got 'x'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "kv_offload", "disk"); }), "kv_offload: must be 'ram' or 'file:DIR', got 'disk'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "kv_prefetch", "maybe"); }),
            "kv_prefetch: must be on or off (true or false), got 'maybe'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "tip_mass", "1.5"); }), "tip_mass: must be a share from 0 to 1 (0: off), got '1.5'");
  EXPECT_EQ(test::error_message([&] { set_policy_option(o, "budgte", "8"); }).rfind("no setting 'budgte' (the settings: attn, budget, ", 0), 0u);
  EXPECT_EQ(o, before);  // a refused value changes nothing
}

}  // namespace
}  // namespace fasa
