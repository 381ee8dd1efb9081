#pragma once
// Offline calibration (docs/FASA.md §2): dense runs over a calibration text measure the mean CA of every
// (layer, query head, chunk); the profile keeps it all and names each head's n_tip best chunks.
#include <functional>
#include <string>

#include "calib/profile.h"
#include "model/session.h"

namespace fasa {

struct CalibrationOptions {
  int n_tip = 0;          // 0: n_rot / 8 chunks (a quarter of them), at least 1; > 0 also fixes the chunk choice's count
  int top_k = 64;
  int64_t min_pos = 128;  // queries before this position are skipped
  int64_t n_ctx = 0;      // window length; 0: the model's training context
};

// The token windows of `text` (calib/agreement.h's token_windows; n_ctx 0: the model's training context).
std::vector<std::vector<int32_t>> text_windows(const Model& m, const std::string& text, int64_t n_ctx,
                                               int64_t* n_tokens = nullptr);

// Prefills each of `windows` in a dense session of its own with the `observer` attached; reports
// progress.
void run_dense_windows(const Model& m, const std::vector<std::vector<int32_t>>& windows, AttentionObserver& observer,
                       const std::string& progress_label);

class AgreementMeter;
// The profile of what `meter` measured (calibration_text and _tokens left for the caller).
Profile profile_from_agreement(const Model& m, const AgreementMeter& meter, int n_tip, int top_k, int64_t min_pos);

Profile calibrate(const Model& m, const std::string& text, const std::string& text_name, const CalibrationOptions& o);

}  // namespace fasa
