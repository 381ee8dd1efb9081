// Soak: decodes N tokens (default 100000) in one FASA context on a model (default: the bundled one)
// and samples RSS every N/20 tokens. The KV cache's pages are committed as positions are written,
// so RSS may grow by exactly the KV bytes of the new positions; anything beyond that (+5 % + 8 MiB)
// after the first tenth of the run is a leak and fails. Prints the curve.
// Usage: fasa_soak [N] [MODEL] [PROFILE]   (no profile: a synthetic one, speed/soak only)
#include <fasa/fasa.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "model/model.h"
#include "ops/kv_rows.h"

namespace {

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long kib = 0;
  while (status >> key)
    if (key == "VmRSS:" && status >> kib) break;
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  const std::string model = argc > 2 ? argv[2] : FASA_DEFAULT_MODEL;
  try {
    fasa::Engine engine(model);
    const fasa::ModelConfig& c = engine.model().config;
    fasa::ContextOptions co;
    co.n_ctx = n + 16;
    co.policy.attn = "fasa";
    co.policy.budget = fasa::Budget::count(256);
    co.policy.fcs = 8;
    co.policy.dense_layers = {};
    if (argc > 3) co.policy.profile = argv[3];
    else co.policy.synthetic_profile = true;
    const size_t row_bytes = fasa::kv_row_bytes(co.policy.cache.types.k, c.head_dim) +
                             fasa::kv_row_bytes(co.policy.cache.types.v, c.head_dim);
    const double kv_kib_per_token = (double)c.n_layer * c.n_head_kv * row_bytes / 1024;
    fasa::Context ctx(engine, co);
    ctx.feed("Ge1:1 In the beginning");
    fasa::GenerationOptions g;
    g.max_tokens = n / 20;
    g.ignore_eos = true;
    g.sampling.temperature = 0.8f;

    long base_rss = 0;
    int64_t base_pos = 0;
    bool leak = false;
    std::printf("%10s %10s %12s %12s %8s\n", "tokens", "RSS KiB", "expected KiB", "tokens/s", "");
    for (int step = 1; step <= 20; ++step) {
      g.sampling.seed = step;
      const fasa::GenerationResult r = ctx.generate(g);
      const long rss = rss_kib();
      if (step == 2) {  // the first tenth: weights and scratch are in by now
        base_rss = rss;
        base_pos = ctx.n_past();
      }
      const double expected = base_rss + (ctx.n_past() - base_pos) * kv_kib_per_token;
      const bool over = step > 2 && rss > expected * 1.05 + 8192;
      leak |= over;
      std::printf("%10lld %10ld %12.0f %12.1f %8s\n", (long long)ctx.n_past(), rss, step >= 2 ? expected : 0.0,
                  r.n_tokens / r.seconds, over ? "LEAK?" : "");
      std::fflush(stdout);
    }
    std::printf("soak: %s (KV %.2f KiB per token)\n", leak ? "RSS grew beyond the KV cache" : "RSS flat apart from the KV cache",
                kv_kib_per_token);
    return leak ? 1 : 0;
  } catch (const fasa::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
