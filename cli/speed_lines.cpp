#include "cli/speed_lines.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>

#include "api/kv_memory_report.h"
#include "util/memory.h"

namespace fasa::cli {

int64_t decoded_steps(const GenerationResult& r) {
  return r.finish_reason == FinishReason::Stop ? r.n_tokens : std::max(0, r.n_tokens - 1);
}

void print_speed_lines(const Engine& engine, const Context& ctx, const std::string& model, int64_t decode_steps) {
  const ContextStats st = ctx.stats();
  std::fprintf(stderr, "\nmodel: %s (%s, %s, %.2fM params), attn: %s, threads: %d, ctx: %lld\n", model.c_str(),
               engine.info().arch.c_str(), engine.info().format.c_str(), engine.info().n_params / 1e6,
               ctx.policy_summary().c_str(), omp_get_max_threads(), (long long)ctx.n_ctx());
  std::fprintf(stderr, "device: %s\n", engine.info().device.c_str());
  std::fprintf(stderr, "prompt: %lld tokens in %.3f s = %.1f tokens/s\n", (long long)st.prompt_tokens,
               st.prompt_seconds, st.prompt_seconds > 0 ? st.prompt_tokens / st.prompt_seconds : 0.0);
  std::fprintf(stderr, "decode: %lld tokens in %.3f s = %.1f tokens/s, KV read %.1f KiB per token\n", (long long)decode_steps,
               st.decode_seconds, decode_steps > 0 ? decode_steps / st.decode_seconds : 0.0,
               st.decode_steps > 0 ? (double)st.decode_kv_bytes_read / 1024.0 / (double)st.decode_steps : 0.0);
  std::fprintf(stderr, "%s\n", kv_memory_line(ctx.kv_memory()).c_str());
  const MemoryEstimate e = ctx.memory_estimate();
  const ModelInfo& info = engine.info();
  const std::string held =
      info.device != "CPU" ? "the device holds them"
                           : mib_text((double)info.packed_weight_bytes) + " of it packed for this CPU" +
                                 (info.locked_weight_bytes ? ", " + mib_text((double)info.locked_weight_bytes) + " locked in RAM" : "");
  std::fprintf(stderr, "memory: weights %s (%s) + vocabulary %s + KV %s + scratch %s = %s estimated, peak RSS %s\n",
               mib_text((double)e.weights).c_str(), held.c_str(), mib_text((double)e.vocab).c_str(),
               mib_text((double)e.kv).c_str(), mib_text((double)e.scratch).c_str(), mib_text((double)e.total()).c_str(),
               mib_text((double)peak_resident_memory_bytes()).c_str());
}

}  // namespace fasa::cli
