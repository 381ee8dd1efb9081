#include "calib/calibrate.h"

#include <algorithm>

#include "calib/agreement.h"
#include "calib/chunk_choice.h"
#include "fasa/error.h"
#include "util/progress.h"

namespace fasa {

namespace {

// Forwards to another observer and advances a progress bar once per layer pass.
class ProgressObserver : public AttentionObserver {
 public:
  ProgressObserver(AttentionObserver& inner, ProgressBar& bar) : inner_(inner), bar_(bar) {}
  void on_queries(int layer, int64_t p0, int n, const float* q, const KvCache& cache) override {
    inner_.on_queries(layer, p0, n, q, cache);
    bar_.advance(n);
  }

 private:
  AttentionObserver& inner_;
  ProgressBar& bar_;
};

}  // namespace

std::vector<std::vector<int32_t>> text_windows(const Model& m, const std::string& text, int64_t n_ctx,
                                               int64_t* n_tokens) {
  const std::vector<int32_t> tokens = m.tokenizer.encode(text, m.tokenizer.add_bos());
  if (tokens.size() < 2) throw Error("the text is too short to measure anything");
  if (n_tokens) *n_tokens = (int64_t)tokens.size();
  return token_windows(tokens, n_ctx > 0 ? n_ctx : m.config.n_ctx_train, m.tokenizer.bos());
}

void run_dense_windows(const Model& m, const std::vector<std::vector<int32_t>>& windows, AttentionObserver& observer,
                       const std::string& progress_label) {
  int64_t total = 0;
  SessionOptions so;
  for (auto& w : windows) {
    total += (int64_t)w.size() * m.config.n_global_layers();  // (the observer's layers)
    so.n_ctx = std::max<int64_t>(so.n_ctx, (int64_t)w.size());
  }
  ProgressBar bar(progress_label, total);
  ProgressObserver counting(observer, bar);
  for (auto& w : windows) {
    Session s(m, so);
    s.set_observer(&counting);
    s.prefill(w);
  }
}

Profile profile_from_agreement(const Model& m, const AgreementMeter& meter, int n_tip, int top_k, int64_t min_pos) {
  Profile p;
  p.model = fingerprint(m);
  p.queries = meter.fc_queries();
  p.top_k = top_k;
  p.min_pos = min_pos;
  p.n_tip = n_tip;
  p.n_fc = FcLayout(m.config).n_fc();
  p.mean_ca = meter.mean_fc_ca();
  p.channel_qk = meter.channel_qk();
  return p;
}

Profile calibrate(const Model& m, const std::string& text, const std::string& text_name, const CalibrationOptions& o) {
  const ModelConfig& c = m.config;
  const FcLayout fcs(c);
  const int n_tip = o.n_tip > 0 ? o.n_tip : default_n_tip(c);
  if (n_tip > fcs.n_fc())
    throw Error("fcs: " + std::to_string(n_tip) + " exceeds the " + std::to_string(fcs.n_fc()) + " chunks per head");
  AgreementMeter meter(c, o.top_k, o.min_pos);
  int64_t n_tokens = 0;
  const auto windows = text_windows(m, text, o.n_ctx, &n_tokens);
  run_dense_windows(m, windows, meter, "calibrating");
  if (meter.fc_queries() == 0)
    throw Error("no query was measured: the text needs more than max(--min-pos, --topk) = " +
                std::to_string(std::max<int64_t>(o.min_pos, o.top_k)) + " tokens per window");
  Profile p = profile_from_agreement(m, meter, n_tip, o.top_k, o.min_pos);
  p.calibration_text = text_name;
  p.calibration_tokens = n_tokens;
  p.choice = choose_chunks(m, p, windows, o.n_tip);
  return p;
}

}  // namespace fasa
