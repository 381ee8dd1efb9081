// Memory checks: a stated limit is what the loaders and the KV cache see; weights or a KV cache over it
// are refused with their sizes (never an out-of-memory kill); weights packed, read in place or read into
// memory (--no-mmap) give the same logits; --mlock locks them.
#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "fasa/error.h"
#include "fasa/fasa.h"
#include "model/session.h"
#include "util/memory.h"
#include "bench/synthetic_model.h"
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

// The same quantized model packed from its mapped file, packed from the file read into memory
// (--no-mmap: the packed rows' bytes freed, as the mapping's pages are dropped) and read in place:
// every logit is the same (the packed kernels are bit-identical; a freed row read again would not be).
TEST(Memory, PackedReadInAndInPlaceWeightsGiveTheSameLogits) {
  FASA_REQUIRE_SHARED();
  for (const char* file : {"kjv-tiny-Q8_0.gguf", "kjv-tiny-Q4_0.gguf", "kjv-tiny-Q4_K_M.gguf"}) {
    const std::string path = test::shared_dir() + "/models/kjv-tiny/quant/" + file;
    const auto packed = load_model(path);
    const auto read_in = load_model(path, {.mmap = false});
    const auto in_place = load_model(path, {.pack_for_cpu = false});
    EXPECT_EQ(read_in->packed_weight_bytes(), packed->packed_weight_bytes()) << file;
    EXPECT_EQ(in_place->packed_weight_bytes(), 0u) << file;
    if (packed->packed_weight_bytes() == 0)
      std::printf("note: %s: this CPU packs no weights (no AVX2 kernels), so every load reads in place\n", file);
    EXPECT_EQ(read_in->weights.sampled_hash, packed->weights.sampled_hash) << file;  // the profiles' fingerprint
    const auto tokens = packed->tokenizer.encode("Ge1:1 In the beginning God created the heaven and the earth. And the "
                                                 "earth was without form, and void; and darkness was upon the face of "
                                                 "the deep.", true);
    Session a(*packed, {}), b(*read_in, {}), c(*in_place, {});
    std::vector<float> la, lb, lc;  // every prompt position's logits: batches of 40+ tokens take the tiles
    a.prefill(tokens, &la);
    b.prefill(tokens, &lb);
    c.prefill(tokens, &lc);
    ASSERT_EQ(la, lb) << file;
    ASSERT_EQ(la, lc) << file;
    for (int32_t t : {5, 17, 99}) {
      const auto da = a.decode(t), db = b.decode(t), dc = c.decode(t);
      ASSERT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end())) << file << " decoding " << t;
      ASSERT_TRUE(std::equal(da.begin(), da.end(), dc.begin(), dc.end())) << file << " decoding " << t;
    }
  }
}

// Weights over what is available are refused before they are read, naming the file and both sizes,
// mapped or read into memory (--no-mmap).
TEST(Memory, WeightsOverTheLimitAreRefusedWithTheirSizes) {
  StatedLimit limit("1");
  for (bool mmap : {true, false}) {
    try {
      load_model(FASA_BUNDLED_MODEL, {.mmap = mmap});
      FAIL() << "the bundled model was loaded under a 1 MiB limit (mmap " << mmap << ")";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(FASA_BUNDLED_MODEL), std::string::npos) << what;
      EXPECT_NE(what.find(mmap ? "its weights would take " : "the model's files read into memory would take "),
                std::string::npos) << what;
      EXPECT_NE(what.find("more than 90 % of the 1.0 MiB of memory available"), std::string::npos) << what;
    }
  }
}

size_t locked_kib() {  // /proc/self/status's VmLck
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;)
    if (key == "VmLck:") {
      size_t kib = 0;
      status >> kib;
      return kib;
    }
  return 0;
}

// --mlock locks what decoding reads: the packed copies and the rest of the rows (the system's count of
// locked memory grows by at least the packed copies), or says why it could not.
TEST(Memory, MlockLocksTheWeightsDecodingReads) {
  FASA_REQUIRE_SHARED();
  const std::string path = test::shared_dir() + "/models/kjv-tiny/quant/kjv-tiny-Q4_0.gguf";
  const size_t before = locked_kib();
  testing::internal::CaptureStderr();
  const auto m = load_model(path, {.mlock = true});
  const std::string said = testing::internal::GetCapturedStderr();
  if (m->weights.locked_bytes == 0) {  // refused (RLIMIT_MEMLOCK without CAP_IPC_LOCK): a warning says so
    EXPECT_NE(said.find(path + ": --mlock: cannot lock"), std::string::npos) << said;
    GTEST_SKIP() << "this process may not lock memory: " << said;
  }
  EXPECT_GE(m->weights.locked_bytes, m->packed_weight_bytes());
  EXPECT_GT(m->weights.locked_bytes, m->weight_bytes() / 2);
  EXPECT_GE((locked_kib() - before) * 1024, m->packed_weight_bytes());
  EXPECT_EQ(load_model(path)->weights.locked_bytes, 0u);
}

// The estimate a context reports (weights as held, KV cache, scratch) against the resident memory a
// model and a context add, once a prompt of a whole ubatch has read every weight: three shapes, packed
// and in place, dense and a mixture of experts, within 10 %.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)  // (GCC's names)
#define FASA_SANITIZED 1
#elif defined(__has_feature)  // (clang's)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FASA_SANITIZED 1
#endif
#endif
TEST(Memory, TheEstimateIsWithinTenPercentOfTheResidentMemory) {
#ifdef FASA_SANITIZED
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are part of the resident set here";
#endif
  const std::pair<ModelShape, DType> shapes[] = {
      // llama, tied output, GQA 4:1, Q4_0: packed wherever there is AVX2
      {{"llama-128m", "llama", 8, 1024, 16, 4, 3072, 8000, 4096, 10000.0f, 0.0f, true}, DType::Q4_0},
      // qwen2 (Q/K/V biases), GQA 7:1, F16: never packed, read in place
      {{"qwen2-96m", "qwen2", 6, 896, 14, 2, 4864, 8000, 4096, 1000000.0f, 0.0f, true}, DType::F16},
      // a mixture of 32 experts, 4 per token, untied output (its embedding's rows read in place)
      {{"moe-160m", "qwen3moe", 6, 512, 8, 2, 512, 8000, 4096, 1000000.0f, 0.0f, false, 64, 32, 4, 512}, DType::Q4_0},
  };
  for (const auto& [shape, type] : shapes) {
    const std::string path = test::temp_dir() + "/" + shape.name + ".gguf";
    write_synthetic_model(shape, type, path);
    malloc_trim(0);  // the writer's freed buffers out of the resident set, so what follows is the model's
    const size_t before = resident_memory_bytes();
    Engine engine(path);
    ContextOptions o;
    o.n_ctx = 2048;
    Context ctx(engine, o);
    std::vector<int32_t> prompt(300);  // more than a ubatch, so the scratch takes its largest size
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 3 + (int32_t)(i * 37 % 7900);
    ctx.feed_tokens(prompt);
    ctx.logits();
    const double added = (double)resident_memory_bytes() - (double)before;
    const MemoryEstimate e = ctx.memory_estimate();
    std::printf("%s (%s, %.1f MiB packed): estimate %.1f MiB (weights %.1f, vocabulary %.1f, KV %.1f, scratch %.1f), "
                "RSS added %.1f MiB\n", shape.name.c_str(), dtype_name(type), engine.info().packed_weight_bytes / 1048576.0,
                e.total() / 1048576.0, e.weights / 1048576.0, e.vocab / 1048576.0, e.kv / 1048576.0,
                e.scratch / 1048576.0, added / 1048576.0);
    EXPECT_GT(e.kv, 0u);
    EXPECT_GT(e.scratch, 0u);
    EXPECT_NEAR((double)e.total(), added, 0.1 * added) << shape.name;
  }
}

}  // namespace
}  // namespace fasa
