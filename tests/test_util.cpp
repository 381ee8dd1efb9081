#include "test_util.h"

#include "bench/synthetic_model.h"
#include "fasa/error.h"
#include "model/arch.h"
#include "model/sampler.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fasa::test {

std::string shared_dir() {
  const char* env = std::getenv("FASA_SHARED");
  std::string d = env && *env ? env : FASA_SHARED_DIR;
  return std::filesystem::exists(std::filesystem::path(d) / "models") ? d : "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), (std::streamsize)bytes.size());
}

namespace {
struct TempRoot {
  std::filesystem::path path;
  TempRoot() {
    path = std::filesystem::temp_directory_path() / ("fasa-tests-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string temp_dir() {
  static TempRoot root;
  static int counter = 0;
  auto p = root.path / std::to_string(counter++);
  std::filesystem::create_directories(p);
  return p.string();
}

namespace {
// Tests never read or write the user's cache (FASA's automatic profiles): theirs is a temp dir.
const bool kPrivateCache = [] { return setenv("XDG_CACHE_HOME", temp_dir().c_str(), 1) == 0; }();
}  // namespace

std::vector<int32_t> greedy_tokens(Session& s, const std::vector<int32_t>& prompt, int n) {
  std::span<const float> logits = s.prefill(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    if (i + 1 < n) logits = s.decode(out.back());
  }
  return out;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double normalized_error(const float* a, const float* b, size_t n) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, (double)std::fabs(a[i] - b[i]));
    max_ref = std::max(max_ref, (double)std::fabs(b[i]));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

int tiny_vocab_size(const TinyLlamaSpec& s) { return 259 + (int)s.extra_tokens.size(); }

GgufWriter tiny_llama_gguf(const TinyLlamaSpec& s) {
  GgufWriter w;
  w.kv_string("general.architecture", s.arch);
  write_llama_hparams(w, {"tiny", s.arch, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.n_ff, tiny_vocab_size(s), s.n_ctx,
                          10000.0f, 0.0f, false});
  write_byte_vocabulary(w, s.extra_tokens, s.tokenizer_model);

  const int64_t V = tiny_vocab_size(s), E = s.n_embd, D = s.n_embd / s.n_head;
  const int64_t Q = s.n_head * D, KV = s.n_head_kv * D, F = s.n_ff;
  uint32_t seed = s.seed;
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    if (name == s.skip_tensor) return;
    if (name == s.misshape_tensor) ne[0] += 1;
    int64_t n = 1;
    for (auto d : ne) n *= d;
    auto v = random_floats((size_t)n, seed++, 0.3f);
    if (ne.size() == 1)
      for (auto& x : v) x = 1.0f + 0.1f * x;  // norm weights near one
    if (name == s.scale_tensor)
      for (auto& x : v) x *= s.scale;
    w.tensor_f32(name, ne, v);
  };
  add("token_embd.weight", {E, V});
  add("output_norm.weight", {E});
  add("output.weight", {E, V});
  if (!s.extra_tensor.empty()) add(s.extra_tensor, {D / 2});
  const Architecture* arch = find_gguf_architecture(s.arch);  // (null: a name tests see refused)
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {E});
    add(p + "attn_q.weight", {E, Q});
    add(p + "attn_k.weight", {E, KV});
    add(p + "attn_v.weight", {E, KV});
    if (arch && arch->qkv_bias)
      for (auto [t, n] : {std::pair{"q", Q}, {"k", KV}, {"v", KV}}) add(p + "attn_" + t + ".bias", {n});
    if (arch && arch->qk_norm) {
      add(p + "attn_q_norm.weight", {D});
      add(p + "attn_k_norm.weight", {D});
    }
    add(p + "attn_output.weight", {Q, E});
    add(p + "ffn_norm.weight", {E});
    add(p + "ffn_gate.weight", {E, F});
    add(p + "ffn_up.weight", {E, F});
    add(p + "ffn_down.weight", {F, E});
  }
  return w;
}

}  // namespace fasa::test
