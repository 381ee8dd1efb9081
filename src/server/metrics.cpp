#include "server/metrics.h"

#include <cstdio>

#include "util/memory.h"

namespace fasa {

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + buf + "\n";
}

}  // namespace

std::string ServerMetrics::render(int active, int waiting, int batch, int64_t prefilling) const {
  std::lock_guard lock(mu_);
  std::string out = "# HELP fasa_requests_total HTTP responses by status code (499: the client went away mid-generation).\n# TYPE fasa_requests_total counter\n";
  for (const auto& [status, n] : responses_)
    out += "fasa_requests_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  metric(out, "fasa_prompt_tokens_total", "counter", "Prompt tokens prefilled.", (double)prompt_tokens_);
  metric(out, "fasa_generated_tokens_total", "counter", "Tokens generated.", (double)generated_tokens_);
  metric(out, "fasa_prompt_seconds_total", "counter", "Time spent in prefill.", prompt_seconds_);
  metric(out, "fasa_decode_seconds_total", "counter", "Time spent decoding.", decode_seconds_);
  metric(out, "fasa_decode_tokens_per_second", "gauge", "Generated tokens per decode second, over all requests.",
         decode_seconds_ > 0 ? generated_tokens_ / decode_seconds_ : 0.0);
  metric(out, "fasa_prompt_tokens_per_second", "gauge", "Prompt tokens per prefill second, over all requests.",
         prompt_seconds_ > 0 ? prompt_tokens_ / prompt_seconds_ : 0.0);
  metric(out, "fasa_requests_cancelled_total", "counter", "Generations cancelled by a client disconnect.", (double)cancelled_);
  metric(out, "fasa_kv_bytes_read_total", "counter", "KV cache bytes read by the attention kernels and the selection policies.", (double)kv_bytes_read_);
  metric(out, "fasa_requests_active", "gauge", "Generations running now.", active);
  metric(out, "fasa_requests_waiting", "gauge", "Requests waiting for a free slot.", waiting);
  metric(out, "fasa_batch_size", "gauge", "Generations advancing together in each forward pass.", batch);
  metric(out, "fasa_batch_prompt_tokens_pending", "gauge", "Prompt tokens of the batch still to prefill.", (double)prefilling);
  metric(out, "fasa_resident_bytes", "gauge", "The server process's resident memory (weights, KV caches, buffers).",
         (double)resident_memory_bytes());
  metric(out, "fasa_peak_resident_bytes", "gauge", "Its peak resident memory since it started.",
         (double)peak_resident_memory_bytes());
  return out;
}

}  // namespace fasa
