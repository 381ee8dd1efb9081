#pragma once
// Where a KV cache lives (FASA-M's tiers), as JSON fields for `run --stats-json` and bench rows, and as
// one line for people.
#include <nlohmann/json.hpp>
#include <string>

#include "fasa/kv_memory.h"

namespace fasa {

// kv_fast_bytes, kv_slow_bytes, kv_full_bytes, kv_page_cache_bytes, rss_bytes and the rows fetched by source.
nlohmann::json kv_memory_json(const KvMemory& m);
std::string kv_memory_line(const KvMemory& m);

}  // namespace fasa
