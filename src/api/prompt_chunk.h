#pragma once
// How many prompt tokens a Batch pass may take while other members generate (fasa serve
// --max-pause-ms): a pass costs about `decode_seconds` (the generating members' steps) plus
// `token_seconds` per prompt token, both measured on earlier passes.
#include <algorithm>
#include <cstdint>

namespace fasa {

// A waiting prompt gets at least this many tokens a pass, so it is never starved.
constexpr int64_t kMinPromptChunk = 8;
// Before a prompt token's cost is known, a chunk this size measures it.
constexpr int64_t kProbePromptChunk = 32;

// `room`: the pass's free tokens (at least kMinPromptChunk). With no limit (max_pass_seconds 0) or
// no one generating, all of it. Where the decode steps alone take longer than the limit, the prompt
// gets as long again as they take (the pause at most doubles, and the prompt still moves on).
inline int64_t prompt_chunk(int64_t room, bool generating, double max_pass_seconds, double decode_seconds,
                            double token_seconds) {
  if (!generating || max_pass_seconds <= 0) return room;
  if (token_seconds <= 0) return std::min(room, kProbePromptChunk);
  const double budget = std::max(max_pass_seconds - decode_seconds, decode_seconds);
  const double fits = std::clamp(budget / token_seconds, (double)kMinPromptChunk, (double)room);
  return std::min(room, (int64_t)fits);
}

}  // namespace fasa
