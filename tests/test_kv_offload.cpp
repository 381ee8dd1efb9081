// FASA-M: K_rest and V in a slow tier. Rows fetched from RAM or a file (with and without the
// prefetch thread, across chunks, after truncation) equal the resident cache's bytes; a session's
// logits equal FASA-C's; the fast limit holds; file faults are clear errors.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "fasa/error.h"
#include "api/kv_memory_report.h"
#include "kv/kv_cache.h"
#include "kv/slow_tier.h"
#include "model/session.h"
#include "bench/synthetic_model.h"
#include "sparse/policy.h"
#include "util/options_text.h"
#include "test_util.h"

namespace fasa {
namespace {

constexpr int kLayers = 2, kHeads = 2, kDim = 16;

// Layer 0 identity (stays resident), layer 1 with 4 dominant dims (offloaded).
std::vector<KeyLayout> layouts() {
  std::vector<KeyLayout> out(kLayers * kHeads);
  for (int h = 0; h < kHeads; ++h) {
    KeyLayout& l = out[kHeads + h];
    for (int d = 0; d < kDim; ++d) l.perm.push_back((d * 5 + h) % kDim);
    l.n_dom = 4;
  }
  return out;
}

KvOffloadOptions offload(KvOffloadOptions::Tier tier, bool prefetch) {
  KvOffloadOptions o;
  o.tier = tier;
  o.dir = test::temp_dir();
  o.prefetch = prefetch;
  return o;
}

void store_random(KvCache& c, int64_t p0, int64_t n, uint32_t seed) {
  for (int64_t p = p0; p < p0 + n; ++p)
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kHeads; ++h) {
        const auto k = test::random_floats(kDim, seed + (uint32_t)(p * 7 + l * 3 + h));
        const auto v = test::random_floats(kDim, seed + 99991u + (uint32_t)(p * 7 + l * 3 + h));
        c.store(l, h, p, k.data(), v.data());
      }
}

// Row r of a view as bytes: [k_dom | k_rest | v].
std::vector<uint8_t> row_bytes(const KvHeadView& kv, int64_t r) {
  std::vector<uint8_t> out;
  auto add = [&](const void* p, size_t n) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
  add(kv.k_dom_row(r), kv_row_bytes(kv.k_type, kv.n_dom));
  add(kv.k_rest_row(r), kv_row_bytes(kv.k_type, kv.head_dim - kv.n_dom));
  add(kv.v_row(r), kv.value_row_bytes());
  return out;
}

// Random ascending rows of [0, n), with runs (neighbours are often selected together).
std::vector<int32_t> random_rows(int64_t n, int count, std::mt19937& rng) {
  std::vector<int32_t> rows;
  std::uniform_int_distribution<int64_t> at(0, n - 1);
  while ((int)rows.size() < count) {
    const int64_t r = at(rng);
    for (int64_t i = r; i < std::min(n, r + 3); ++i) rows.push_back((int32_t)i);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

void expect_gathers_equal(const KvCache& resident, const KvCache& off, int64_t n, std::mt19937& rng, bool decode) {
  for (int h = 0; h < kHeads; ++h) {
    ASSERT_TRUE(off.offloaded(1, h));
    ASSERT_FALSE(off.offloaded(0, h));
    const std::vector<int32_t> rows = random_rows(n, 40, rng);
    GatheredRows g;
    const KvHeadView got = off.gather(1, h, rows.data(), (int64_t)rows.size(), decode, g);
    const KvHeadView want = resident.view(1, h, n);
    ASSERT_EQ(got.n_tokens, (int64_t)rows.size());
    for (size_t j = 0; j < rows.size(); ++j) ASSERT_EQ(row_bytes(got, (int64_t)j), row_bytes(want, rows[j])) << rows[j];
  }
}

TEST(KvOffload, FetchedRowsEqualTheResidentCache) {
  for (auto tier : {KvOffloadOptions::Tier::Ram, KvOffloadOptions::Tier::File})
    for (bool prefetch : {false, true})
      for (KvTypes type : {KvTypes(DType::F16), KvTypes(DType::F32), KvTypes(DType::F16, DType::Q8_0, true), KvTypes(DType::Q8_0, DType::F16)}) {
        SCOPED_TRACE(testing::Message() << "file " << (tier == KvOffloadOptions::Tier::File) << " prefetch " << prefetch
                                        << " keys " << dtype_name(type.k));
        const int64_t n_ctx = 1100;  // five chunks of 256 rows
        KvCache resident(kLayers, kHeads, kDim, n_ctx, layouts(), type);
        KvCache off(kLayers, kHeads, kDim, n_ctx, layouts(), type, offload(tier, prefetch));
        store_random(resident, 0, 900, 1);
        store_random(off, 0, 900, 1);
        std::mt19937 rng(7);
        for (int step = 0; step < 6; ++step) {  // decode steps: the prefetch thread reads the last selection
          off.begin_decode_layer(0);
          off.begin_decode_layer(1);
          expect_gathers_equal(resident, off, 900, rng, true);
        }
        expect_gathers_equal(resident, off, 900, rng, false);
        // Back into an earlier chunk: positions from 300 are written again with other values.
        off.truncate(300);
        store_random(resident, 300, 700, 5);
        store_random(off, 300, 700, 5);
        off.begin_decode_layer(0);
        off.begin_decode_layer(1);
        expect_gathers_equal(resident, off, 1000, rng, true);
        const KvMemory m = off.memory();
        EXPECT_GT(m.rows.misses, 0u);
        EXPECT_GT(m.rows.tail, 0u);
        if (prefetch) {
          EXPECT_GT(m.rows.prefetched, 0u);
        } else {
          EXPECT_EQ(m.rows.hits, 0u);
        }
        EXPECT_LT(m.fast, resident.memory().fast);
        EXPECT_EQ(m.full, resident.memory().full);
        EXPECT_GT(m.slow, 0u);
      }
}

TEST(KvOffload, RepeatedSelectionsArePrefetched) {
  KvCache off(kLayers, kHeads, kDim, 2000, layouts(), DType::F16, offload(KvOffloadOptions::Tier::File, true));
  store_random(off, 0, 1800, 3);
  const std::vector<int32_t> rows = {3, 4, 5, 100, 700, 701, 1000};  // all before the tail chunk
  GatheredRows g;
  for (int step = 0; step < 5; ++step) {
    off.begin_decode_layer(0);
    off.begin_decode_layer(1);
    for (int h = 0; h < kHeads; ++h) off.gather(1, h, rows.data(), (int64_t)rows.size(), true, g);
  }
  const KvMemory m = off.memory();
  EXPECT_EQ(m.rows.misses, 2u * rows.size());  // the first step only
  EXPECT_EQ(m.rows.hits, 4u * 2u * rows.size());
  EXPECT_DOUBLE_EQ(m.rows.hit_rate(), 0.8);
}

TEST(KvOffload, PrefetchStopsWhenSelectionsDoNotRepeat) {
  KvCache off(kLayers, kHeads, kDim, 5000, layouts(), DType::F16, offload(KvOffloadOptions::Tier::Ram, true));
  store_random(off, 0, 4800, 3);
  std::mt19937 rng(1);
  GatheredRows g;
  const int steps = 48;
  for (int step = 0; step < steps; ++step) {
    off.begin_decode_layer(0);
    off.begin_decode_layer(1);
    for (int h = 0; h < kHeads; ++h) {
      const std::vector<int32_t> rows = random_rows(4600, 120, rng);  // a new selection every step
      off.gather(1, h, rows.data(), (int64_t)rows.size(), true, g);
    }
  }
  const KvMemory m = off.memory();
  EXPECT_LT(m.rows.hit_rate(), 0.25);
  // Prefetched on the first steps until judged, then only on the probe steps (16, 32, 48).
  EXPECT_LT(m.rows.prefetched, (uint64_t)(0.4 * steps * kHeads * 120));
  EXPECT_GT(m.rows.prefetched, 0u);
}

TEST(KvOffload, RandomFillEqualsTheResidentCache) {
  KvCache resident(kLayers, kHeads, kDim, 700, layouts(), DType::F16);
  KvCache off(kLayers, kHeads, kDim, 700, layouts(), DType::F16, offload(KvOffloadOptions::Tier::Ram, false));
  resident.fill_random(0, 650, 11);
  off.fill_random(0, 650, 11);
  std::mt19937 rng(3);
  expect_gathers_equal(resident, off, 650, rng, false);
}

TEST(KvOffload, FastLimit) {
  KvOffloadOptions o = offload(KvOffloadOptions::Tier::Ram, true);
  const size_t dense = (size_t)kLayers * kHeads * 4000 * 2 * kDim * 2;
  o.fast_limit = dense * 7 / 10;  // layer 0 whole + layer 1's K_dom (4 of 16 dims) + a chunk fit; the dense cache does not
  KvCache off(kLayers, kHeads, kDim, 4000, layouts(), DType::F16, o);
  store_random(off, 0, 4000, 2);
  EXPECT_LE(off.memory().fast, o.fast_limit);
  KvOffloadOptions resident_only;
  resident_only.fast_limit = dense * 7 / 10;
  try {
    KvCache c(kLayers, kHeads, kDim, 4000, layouts(), DType::F16, resident_only);
    ADD_FAILURE() << "a dense cache over the limit was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_offload"), std::string::npos) << e.what();
  }
  o.fast_limit = dense / 4;  // below layer 0 alone
  EXPECT_THROW(KvCache(kLayers, kHeads, kDim, 4000, layouts(), DType::F16, o), Error);
}

TEST(KvOffload, OptionsParse) {
  EXPECT_EQ(parse_byte_size("512M", "x"), 512u << 20);
  EXPECT_EQ(parse_byte_size("1.5G", "x"), 3u << 29);
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096u);
  for (const char* bad : {"", "M", "-1G", "12Q", "1e30", "nan"}) EXPECT_THROW(parse_byte_size(bad, "x"), Error) << bad;
  PolicyOptions p;
  set_policy_option(p, "kv_offload", "file:/tmp");
  EXPECT_EQ(p.cache.offload.tier, KvOffloadOptions::Tier::File);
  EXPECT_EQ(p.cache.offload.dir, "/tmp");
  EXPECT_EQ(offload_str(p.cache.offload), "file:/tmp");
  set_policy_option(p, "kv_offload", "");
  EXPECT_EQ(p.cache.offload.tier, KvOffloadOptions::Tier::None);
  EXPECT_THROW(set_policy_option(p, "kv_offload", "disk"), Error);
  EXPECT_THROW(set_policy_option(p, "kv_offload", "file:"), Error);
  set_policy_option(p, "kv_fast_limit", "2G");
  EXPECT_EQ(p.cache.offload.fast_limit, 2u << 30);
  set_policy_option(p, "kv_offload", "ram");
  EXPECT_THROW(session_options(p, 100), Error);  // full attention has no K_dom plane to keep
  p.attn = "fasa";
  EXPECT_EQ(session_options(p, 100).cache.offload.tier, KvOffloadOptions::Tier::Ram);
  KvOffloadOptions o;
  o.tier = KvOffloadOptions::Tier::Ram;
  EXPECT_THROW(KvCache(1, 1, kDim, 10, {}, DType::F16, o), Error);  // nothing to offload
}

// The file's faults: never silently wrong rows.
TEST(KvOffload, FileFaultsAreClearErrors) {
  const std::string dir = test::temp_dir();
  const SlowTierShape shape{{64, 32}, 32, 4};  // two heads, 32 rows a chunk: 3072 bytes
  const size_t chunk = shape.chunk_bytes();
  std::vector<uint8_t> data(chunk), back(2 * 32);
  for (size_t i = 0; i < chunk; ++i) data[i] = (uint8_t)(i * 7);
  {
    auto tier = make_file_tier(dir, shape);
    tier->write_chunk(0, data.data());
    tier->write_chunk(1, data.data());
    tier->read(1, 32 + 5, 2, back.data());  // the second head's rows 5 and 6 of chunk 1
    EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + 32 * 64 + 5 * 32));
    const std::string path = tier->describe().substr(5);  // "file PATH"
    ASSERT_TRUE(std::filesystem::exists(path));
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);  // shortened behind our back
    EXPECT_THROW(tier->check(), Error);
    std::filesystem::remove(path);  // deleted
    try {
      tier->check();
      ADD_FAILURE() << "a deleted file passed the check";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("deleted"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // the tier removes its file
  EXPECT_THROW(make_file_tier(dir + "/missing", shape), Error);
  // A full disk, as a file-size limit makes it: the write fails with an error naming the file.
  auto tier = make_file_tier(dir, shape);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 4 * 32 * 64 + 2 * 32 * 32;  // the first head's region and two chunks of the second's
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &small);
  tier->write_chunk(0, data.data());
  tier->write_chunk(1, data.data());
  try {
    tier->write_chunk(2, data.data());
    ADD_FAILURE() << "a write past the file-size limit succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fasa-kv-"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
}

// Read-ahead asks for each page a step's rows lie on once (until its chunk is written again), in
// runs that take in short gaps.
TEST(KvOffload, ReadAheadPlansPageRuns) {
  constexpr size_t kPage = 100, kRow = 30, kJoin = 2;
  std::vector<std::atomic<uint8_t>> asked(64);
  std::vector<PageRun> runs;
  size_t fresh = 0;
  auto plan = [&](size_t base, std::vector<int32_t> rows) {
    fresh = plan_page_runs(base, rows.data(), rows.size(), kRow, kPage, kJoin, asked.data(), runs);
    std::vector<std::pair<size_t, size_t>> out;
    for (const PageRun& r : runs) out.emplace_back(r.first, r.count);
    return out;
  };
  using Runs = std::vector<std::pair<size_t, size_t>>;
  // Row 3 (90..119) spans pages 0-1; row 20 (600..629) is page 6, 4 pages after page 1: a new run.
  // Row 30 (900..929) is page 9: 2 pages after 6, joined.
  EXPECT_EQ(plan(0, {3, 20, 30}), (Runs{{0, 2}, {6, 4}}));
  EXPECT_EQ(fresh, 6u);
  for (size_t p : {0, 1, 6, 7, 8, 9}) EXPECT_EQ(asked[p].load(), 1) << p;
  EXPECT_EQ(asked[5].load(), 0);
  EXPECT_EQ(plan(0, {3, 21, 30}), Runs{});  // all asked before: nothing
  EXPECT_EQ(plan(0, {1, 2, 40}), (Runs{{12, 1}}));  // rows 1-2 on page 0 (asked), row 40 on page 12
  EXPECT_EQ(plan(1000, {0}), (Runs{{10, 1}}));  // another head's region starts at byte 1000
  // Row 36 lies on pages 10 (asked) and 11, row 43 on 12 (asked) and 13: one run 11-13, which asks
  // for two pages new to it.
  EXPECT_EQ(plan(0, {36, 43}), (Runs{{11, 3}}));
  EXPECT_EQ(fresh, 2u);
}

// The file tier asks the disk for a page once after its chunk is written; rewriting the chunk (as
// after a truncation) makes its pages new again. Rows read back are the written ones.
TEST(KvOffload, FileTierReadsEachPageAheadOnce) {
  const long page = sysconf(_SC_PAGESIZE);
  const SlowTierShape shape{{(size_t)page / 4, (size_t)page / 2}, 64, 3};  // 16 and 32 pages a chunk
  std::vector<uint8_t> data(shape.chunk_bytes());
  for (size_t i = 0; i < data.size(); ++i) data[i] = (uint8_t)(i * 13 + 1);
  auto tier = make_file_tier(test::temp_dir(), shape);
  tier->write_chunk(0, data.data());
  tier->write_chunk(1, data.data());
  const std::vector<int32_t> rows = {0, 1, 2, 100};  // head 1: pages 0-1 and 50 of its region
  tier->will_read(1, rows.data(), rows.size());
  EXPECT_EQ(tier->disk_read_bytes(), 3u * page);
  tier->will_read(1, rows.data(), rows.size());
  EXPECT_EQ(tier->disk_read_bytes(), 3u * page);  // asked before
  tier->write_chunk(0, data.data());              // rows 0..63 written again: pages 0-31 are new
  tier->will_read(1, rows.data(), rows.size());
  EXPECT_EQ(tier->disk_read_bytes(), 5u * page);
  std::vector<uint8_t> back(page / 2);
  tier->read(1, 100, 1, back.data());  // row 36 of head 1 in a chunk
  EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + 64 * page / 4 + 36 * page / 2));
  ASSERT_NE(tier->mapped(1, 100, 1), nullptr);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), tier->mapped(1, 100, 1)));
  EXPECT_EQ(tier->mapped(1, 128, 1), nullptr);  // chunk 2 was never written
}

// A two-layer synthetic model (head dim 16) for whole-session runs.
std::unique_ptr<Model> tiny_model() {
  const ModelShape shape{"tiny", "llama", 2, 64, 4, 2, 96, 300, 1024, 10000.0f, 8.0f, false};
  const std::string path = test::temp_dir() + "/m.gguf";
  write_synthetic_model(shape, DType::F32, path, 3);
  return load_model(path);
}

PolicyOptions synthetic_fasa() {
  PolicyOptions p;
  p.attn = "fasa";
  p.synthetic_profile = true;
  return p;
}

// A whole model: logits with K_rest and V in a file (prefetch on) or in RAM (prefetch off) equal
// the resident FASA-C cache's, through a prefill longer than a chunk and a decode that crosses chunks.
TEST(KvOffload, SessionLogitsEqualResidentFasa) {
  auto m = tiny_model();
  PolicyOptions p = synthetic_fasa();
  p.fcs = 2;
  p.budget = Budget::count(24);
  p.dense_layers = {};
  std::vector<int32_t> prompt(300);
  std::mt19937 rng(5);
  for (auto& t : prompt) t = 3 + (int32_t)(rng() % 290);
  auto run = [&](const std::string& where, bool prefetch) {
    PolicyOptions q = p;
    set_policy_option(q, "kv_offload", where);
    q.cache.offload.prefetch = prefetch;
    Session s(*m, session_options(q, 600), make_policy(q, *m, nullptr));
    std::vector<std::vector<float>> out;
    auto l = s.prefill(prompt);
    out.emplace_back(l.begin(), l.end());
    for (int i = 0; i < 240; ++i) {  // positions 300..539: into the third chunk
      const int32_t tok = 3 + (i * 37) % 290;
      l = s.decode(tok);
      out.emplace_back(l.begin(), l.end());
    }
    if (!where.empty()) {
      const KvMemory mem = s.cache().memory();
      EXPECT_GT(mem.rows.misses + mem.rows.hits, 0u);
      const bool file = where != "ram";
      EXPECT_EQ(mem.rows.on_disk, file);
      EXPECT_EQ(mem.rows.disk_bytes > 0, file);  // the file's rows were read ahead; RAM has no disk
      EXPECT_EQ(kv_memory_line(mem).find("read from disk") != std::string::npos, file);
      if (prefetch) {
        EXPECT_GT(mem.rows.hits, 0u);
      }
    }
    return out;
  };
  const auto resident = run("", true);
  EXPECT_EQ(run("file:" + test::temp_dir(), true), resident);
  EXPECT_EQ(run("file:" + test::temp_dir(), false), resident);  // the default: read-ahead, no thread
  EXPECT_EQ(run("ram", false), resident);
}

// The cache file deleted or shortened mid-run: the next step is an error, not attention over wrong rows.
TEST(KvOffload, SessionFileFaultIsAnError) {
  auto m = tiny_model();
  PolicyOptions p = synthetic_fasa();
  p.budget = Budget::count(16);
  const std::string dir = test::temp_dir();
  set_policy_option(p, "kv_offload", "file:" + dir);
  for (bool shorten : {false, true}) {
    Session s(*m, session_options(p, 600), make_policy(p, *m, nullptr));
    s.fill_random(520, 1);  // two chunks in the file
    const int32_t tok = 7;
    s.decode(tok);
    const std::string file = std::filesystem::directory_iterator(dir)->path().string();
    if (shorten) std::filesystem::resize_file(file, 1000);
    else std::filesystem::remove(file);
    EXPECT_THROW(s.decode(tok), Error) << (shorten ? "shortened" : "deleted");
  }
}

}  // namespace
}  // namespace fasa
