// Memory checks: a stated limit is what the loaders and the KV cache see; weights whose packed copy
// would not fit are read in place with the same logits; a KV cache over the limit is refused with its
// sizes (never an out-of-memory kill).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "fasa/error.h"
#include "fasa/fasa.h"
#include "model/session.h"
#include "util/memory.h"
#include "test_util.h"

namespace fasa {
namespace {

// FASA_MEMORY_LIMIT_MIB set for the scope, as a user sharing a machine would set it.
class StatedLimit {
 public:
  explicit StatedLimit(const char* mib) {
    if (const char* v = std::getenv(kName)) saved_ = v;
    setenv(kName, mib, 1);
  }
  ~StatedLimit() {
    if (saved_) setenv(kName, saved_->c_str(), 1);
    else unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "FASA_MEMORY_LIMIT_MIB";
  std::optional<std::string> saved_;
};

TEST(Memory, AStatedLimitIsWhatIsAvailable) {
  {
    StatedLimit limit("64");
    EXPECT_EQ(available_memory_bytes(), 64u << 20);
  }
  {
    StatedLimit junk("64x");  // not a number of MiB: ignored
    EXPECT_NE(available_memory_bytes(), 64u << 20);
  }
  // Unlimited, it is /proc/meminfo's MemAvailable (read here the plain way), or a cgroup's smaller headroom.
  std::ifstream meminfo("/proc/meminfo");
  size_t available_kib = 0;
  for (std::string key; meminfo >> key;) {
    if (key == "MemAvailable:") {
      meminfo >> available_kib;
      break;
    }
  }
  if (available_kib > 0) {
    EXPECT_LE(available_memory_bytes(), available_kib * 1024 + (64u << 20));  // (it moves)
  }
  EXPECT_GT(available_memory_bytes(), 0u);
  EXPECT_GT(resident_memory_bytes(), 0u);
  EXPECT_GE(peak_resident_memory_bytes(), resident_memory_bytes() / 2);  // (statm and rusage count alike)
}

// A KV cache over what is available is refused before it is allocated, naming the context and sizes.
TEST(Memory, AKvCacheOverTheLimitIsRefusedWithItsSizes) {
  Engine engine(FASA_BUNDLED_MODEL);
  StatedLimit limit("1");  // the bundled model's dense cache at 4096 tokens takes 8 MiB
  ContextOptions o;
  o.n_ctx = 4096;
  try {
    Context ctx(engine, o);
    FAIL() << "a KV cache of 8 MiB was allocated under a 1 MiB limit";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4096 tokens needs 8388608 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("1048576 bytes (0.00 GiB) of memory are available"), std::string::npos) << what;
  }
}

// The same quantized model loaded with room for its packed copy and without: the second reads its
// weights in place from the file, and every logit is the same (the packed kernels are bit-identical).
TEST(Memory, WeightsReadInPlaceGiveThePackedLogits) {
  FASA_REQUIRE_SHARED();
  for (const char* file : {"kjv-tiny-Q8_0.gguf", "kjv-tiny-Q4_0.gguf", "kjv-tiny-Q4_K_M.gguf"}) {
    const std::string path = test::shared_dir() + "/models/kjv-tiny/quant/" + file;
    const auto packed = load_model(path);
    std::unique_ptr<Model> in_place;
    {
      StatedLimit limit("0.001");
      in_place = load_model(path);
    }
    EXPECT_EQ(in_place->packed_weight_bytes(), 0u) << file;
    if (packed->packed_weight_bytes() == 0)
      std::printf("note: %s: this CPU packs no weights (no VNNI kernels), so both loads read in place\n", file);
    const auto tokens = packed->tokenizer.encode("Ge1:1 In the beginning God created the heaven and the earth. And the "
                                                 "earth was without form, and void; and darkness was upon the face of "
                                                 "the deep.", true);
    Session a(*packed, {}), b(*in_place, {});
    std::vector<float> la, lb;  // every prompt position's logits: batches of 40+ tokens take the tiles
    a.prefill(tokens, &la);
    b.prefill(tokens, &lb);
    ASSERT_EQ(la, lb) << file;
    for (int32_t t : {5, 17, 99}) {
      const auto da = a.decode(t), db = b.decode(t);
      ASSERT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end())) << file << " decoding " << t;
    }
  }
}

}  // namespace
}  // namespace fasa
