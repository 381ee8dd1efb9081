#include "model/model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <sys/mman.h>
#include <unistd.h>

#include "fasa/error.h"
#include "ops/packed_rows.h"
#include "util/memory.h"

namespace fasa {

std::vector<float> ModelConfig::rope_inv_freq(bool local) const {
  std::vector<float> f(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) {
    // As PyTorch computes it: 1 / base^(2i/n_rot) in float32.
    f[i] = 1.0f / std::pow(local ? rope_base_local : rope_base, (float)(2 * i) / (float)n_rot);
    if (!local && !rope_freq_factors.empty()) f[i] /= rope_freq_factors[i];
  }
  return f;
}

int ModelConfig::n_global_layers() const {
  int n = 0;
  for (int l = 0; l < n_layer; ++l) n += !sliding(l);
  return n;
}

float ModelConfig::attention_scale() const { return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt((float)head_dim); }

const char* ModelConfig::rope_scaling_name() const {
  if (rope_freq_factors.empty()) return "no scaling";
  const bool uniform = std::all_of(rope_freq_factors.begin(), rope_freq_factors.end(),
                                   [&](float f) { return f == rope_freq_factors[0]; });
  if (!uniform) return "Llama-3 frequency scaling";
  return rope_freq_factors[0] == 1.0f ? "no scaling" : "linear scaling";
}

void ModelConfig::validate(const std::string& source) const {
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) fail(source, "inconsistent hyper-parameters: " + what);
  };
  check(n_layer >= 1 && n_layer <= 1024, "layer count " + std::to_string(n_layer));
  check(n_embd >= 1 && n_embd <= (1 << 17), "embedding size " + std::to_string(n_embd));
  check(n_expert > 0 || (n_ff >= 1 && n_ff <= (1 << 20)), "feed-forward size " + std::to_string(n_ff));
  check(n_head >= 1 && n_head <= 1024, "head count " + std::to_string(n_head));
  check(n_head_kv >= 1 && n_head_kv <= n_head && n_head % n_head_kv == 0,
        "KV head count " + std::to_string(n_head_kv) + " does not divide head count " + std::to_string(n_head));
  check(head_dim >= 2 && head_dim <= 1024 && head_dim % 2 == 0, "head dim " + std::to_string(head_dim));
  check(n_rot >= 2 && n_rot <= head_dim && n_rot % 2 == 0, "rotary dims " + std::to_string(n_rot));
  check(n_vocab >= 1 && n_vocab <= (1 << 22), "vocabulary size " + std::to_string(n_vocab));
  check(n_ctx_train >= 1 && n_ctx_train <= (1 << 24), "context length " + std::to_string(n_ctx_train));
  check(std::isfinite(rms_eps) && rms_eps > 0 && rms_eps < 1, "rms eps " + std::to_string(rms_eps));
  check(std::isfinite(rope_base) && rope_base > 1, "rope base " + std::to_string(rope_base));
  check(rope_freq_factors.empty() || (int)rope_freq_factors.size() == n_rot / 2,
        "rope frequency factors: " + std::to_string(rope_freq_factors.size()) + " values for " +
            std::to_string(n_rot / 2) + " planes");
  for (float f : rope_freq_factors) check(std::isfinite(f) && f > 0, "rope frequency factor " + std::to_string(f));
  check(sliding_window >= 0 && sliding_window <= (1 << 24), "sliding window " + std::to_string(sliding_window));
  check(sliding_window == 0 || (sliding_period >= 1 && sliding_period <= n_layer + 1),
        "sliding window pattern " + std::to_string(sliding_period));
  check(std::isfinite(rope_base_local) && rope_base_local > 1, "local rope base " + std::to_string(rope_base_local));
  check(std::isfinite(attn_scale) && attn_scale >= 0, "attention scale " + std::to_string(attn_scale));
  check(std::isfinite(final_softcap) && final_softcap >= 0, "final logit soft-cap " + std::to_string(final_softcap));
  if (n_expert > 0) {
    check(n_expert <= 512, "expert count " + std::to_string(n_expert));  // (llama.cpp's limit)
    check(n_expert_used >= 1 && n_expert_used <= n_expert,
          "experts used per token " + std::to_string(n_expert_used) + " of " + std::to_string(n_expert));
    // a pass keeps every chosen expert's output: [tokens, n_expert_used, n_embd] (real models: 8 x 2048)
    check((int64_t)n_expert_used * n_embd <= (1 << 19),
          "experts used per token x embedding size " + std::to_string((int64_t)n_expert_used * n_embd));
    check(n_ff_exp >= 1 && n_ff_exp <= (1 << 20), "expert feed-forward size " + std::to_string(n_ff_exp));
  }
}

std::vector<float> llama3_rope_factors(int n_rot, float base, float factor, float low_freq_factor,
                                       float high_freq_factor, int original_ctx) {
  // Wavelengths longer than original_ctx/low are divided by `factor`, shorter than original_ctx/high
  // are kept, and the band between is interpolated smoothly.
  const float low_wavelen = original_ctx / low_freq_factor;
  const float high_wavelen = original_ctx / high_freq_factor;
  std::vector<float> out(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) {
    const float freq = 1.0f / std::pow(base, (float)(2 * i) / (float)n_rot);
    const float wavelen = 2.0f * (float)M_PI / freq;
    float new_freq;
    if (wavelen < high_wavelen) {
      new_freq = freq;
    } else if (wavelen > low_wavelen) {
      new_freq = freq / factor;
    } else {
      const float smooth = (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      new_freq = (1 - smooth) * freq / factor + smooth * freq;
    }
    out[i] = freq / new_freq;
  }
  return out;
}

namespace {

std::string layer_name(const std::string& pattern, int layer) {
  std::string s = pattern;
  auto p = s.find("{}");
  if (p != std::string::npos) s.replace(p, 2, std::to_string(layer));
  return s;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

const TensorRef& require(const TensorLookup& lookup, const std::string& name, const std::string& source) {
  const TensorRef* t = lookup(name);
  if (!t) fail(source, "missing tensor '" + name + "'");
  return *t;
}

// A [rows, cols] matrix (ggml ne = {cols, rows}) of a type we can compute with. Data that is not
// aligned to its element size (possible in safetensors, whose header length is arbitrary) is copied
// into `owned`, so kernels may load elements directly.
Matrix bind_matrix(const TensorLookup& lookup, const std::string& name, int64_t rows, int64_t cols,
                   const std::string& source, std::vector<std::vector<uint8_t>>& owned) {
  const TensorRef& t = require(lookup, name, source);
  if (t.ne.size() != 2 || t.ne[0] != cols || t.ne[1] != rows)
    fail(t.file, "tensor '" + name + "' has shape " + shape_str(t.ne) + ", expected " +
                     shape_str({cols, rows}) + " (ggml order)");
  if (!dtype_computable(t.type))
    fail(t.file, "tensor '" + name + "' has type " + dtype_name(t.type) +
                     ", which this build cannot compute with (supported: " + computable_dtype_list() + ")");
  Matrix m;
  m.type = t.type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = dtype_bytes(t.type, cols);
  m.data = t.data;
  const size_t align = t.type == DType::F32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(t.data) % align != 0) {
    owned.emplace_back(t.data, t.data + m.row_bytes * rows);
    m.data = owned.back().data();
  }
  return m;
}

std::vector<float> bind_vector(const TensorLookup& lookup, const std::string& name, int64_t n,
                               const std::string& source) {
  const TensorRef& t = require(lookup, name, source);
  if (t.ne.size() != 1 || t.ne[0] != n)
    fail(t.file, "tensor '" + name + "' has shape " + shape_str(t.ne) + ", expected [" + std::to_string(n) + "]");
  if (!dtype_computable(t.type))
    fail(t.file, "tensor '" + name + "' has unsupported type " + std::string(dtype_name(t.type)));
  const std::vector<uint8_t> aligned(t.data, t.data + dtype_bytes(t.type, n));
  std::vector<float> v(n);
  dequantize_row(t.type, aligned.data(), v.data(), n);
  // Cheap to check here; NaN in a matrix shows up as non-finite logits (Session::check_logits).
  if (std::any_of(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }))
    std::fprintf(stderr, "warning: %s: tensor '%s' holds NaN or Inf values; the model will not compute\n",
                 t.file.c_str(), name.c_str());
  return v;
}

// Rows [r0, r0 + n) of m: one part of a fused matrix.
Matrix row_slice(const Matrix& m, int64_t r0, int64_t n) {
  Matrix part = m;
  part.rows = n;
  part.data = m.data + (size_t)r0 * m.row_bytes;
  return part;
}

// The n_expert matrices [rows, cols] of a 3-D tensor (ggml ne = {cols, rows, n_expert}), expert e's
// rows following expert e - 1's; or of one tensor each where `name` holds "{e}" for the expert's number.
std::vector<Matrix> bind_experts(const TensorLookup& lookup, const std::string& name, int64_t n_expert, int64_t rows,
                                 int64_t cols, const std::string& source, std::vector<std::vector<uint8_t>>& owned) {
  std::vector<Matrix> experts;
  if (const size_t at = name.find("{e}"); at != std::string::npos) {  // one tensor per expert (Hugging Face)
    for (int64_t e = 0; e < n_expert; ++e)
      experts.push_back(bind_matrix(lookup, std::string(name).replace(at, 3, std::to_string(e)), rows, cols, source, owned));
    return experts;
  }
  const TensorRef& t = require(lookup, name, source);
  if (t.ne.size() != 3 || t.ne[0] != cols || t.ne[1] != rows || t.ne[2] != n_expert)
    fail(t.file, "tensor '" + name + "' has shape " + shape_str(t.ne) + ", expected " +
                     shape_str({cols, rows, n_expert}) + " (ggml order)");
  TensorRef all = t;  // the experts' rows one after another: one matrix, cut in n_expert
  all.ne = {cols, rows * n_expert};
  const Matrix m = bind_matrix([&](const std::string&) { return &all; }, name, rows * n_expert, cols, source, owned);
  for (int64_t e = 0; e < n_expert; ++e) experts.push_back(row_slice(m, e * rows, rows));
  return experts;
}

// Drops the pages of n bytes at p from memory where they are one of the model's files: in a mapping
// (read-only, private), a row read again comes back from the file; in a file read into memory
// (--no-mmap) they are freed, so only rows `never_read_again` (packed) go. Bytes elsewhere (a heap
// copy in `owned`) are kept. Returns the bytes released: n, or 0.
size_t release_file_pages(const uint8_t* p, size_t n, const ModelWeights& w, bool never_read_again) {
  for (const auto& f : w.mappings) {
    if (!f->contains(p)) continue;
    if (!f->mapped() && !never_read_again) return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t)p + page - 1) / page * page, end = ((uintptr_t)p + n) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    return n;
  }
  return 0;
}

// The bytes of m's rows packed for the decode matmul (ops/packed_rows.h), or 0 where this CPU has no
// kernel for m's type. The last rows % kDirectRows rows stay in the file.
size_t packed_bytes(const Matrix& m) {
  if (!has_packed_rows(m.type) || m.cols % 32 != 0) return 0;
  return (size_t)(m.rows / kDirectRows) * packed_group_bytes(m.type, m.cols);
}

// The output and every layer's matrices: those packed for decode.
std::vector<Matrix*> layer_matrices(ModelWeights& w) {
  std::vector<Matrix*> matrices{&w.output};
  for (LayerWeights& L : w.layers) {
    for (Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) matrices.push_back(m);
    for (auto* experts : {&L.exp_gate, &L.exp_up, &L.exp_down})
      for (Matrix& m : *experts) matrices.push_back(&m);
  }
  return matrices;
}

// Every matrix decoding reads: layer_matrices', the embedding where it is not the output's, the routers.
std::vector<Matrix*> all_matrices(ModelWeights& w) {
  std::vector<Matrix*> all = layer_matrices(w);
  if (w.tok_embd.data != w.output.data) all.push_back(&w.tok_embd);
  for (LayerWeights& L : w.layers) all.push_back(&L.router);
  return all;
}

// Every packable matrix's rows, packed one matrix after another into one buffer: a packed matrix serves
// every batch (matmul.cpp; Q8_0's tiles read the packed copy too), so the file's copy of its rows leaves
// memory as soon as it is packed. The peak holds the packed copies plus 4 MiB of the file's rows, and the
// model's resident size stays what the file is. One buffer, not one per matrix: a 2 MiB-page buffer per
// expert would round each up (a qwen3-30b-a3b shape at Q4_0 took more than 24 GiB for its 17 GB).
size_t packed_slot_bytes(const Matrix& m) {  // each matrix's packed rows start on a cache line
  constexpr size_t kAlign = 64;
  return (packed_bytes(m) + kAlign - 1) / kAlign * kAlign;
}

size_t packed_total(const std::vector<Matrix*>& matrices) {
  size_t total = 0;
  for (const Matrix* m : matrices) total += packed_slot_bytes(*m);
  return total;
}

void pack_for_decode(const std::vector<Matrix*>& matrices, ModelWeights& w) {
  const size_t total = packed_total(matrices);
  if (total == 0) return;
  uint8_t* out = w.packed.emplace(total).data();
  for (Matrix* m : matrices) {
    if (packed_bytes(*m) == 0) continue;
    const int64_t groups = m->rows / kDirectRows;
    const size_t group_bytes = packed_group_bytes(m->type, m->cols), file_group_bytes = kDirectRows * m->row_bytes;
    // A few MiB of the file's rows at a time, their pages dropped once packed: the output matrix alone
    // is 250 MiB at Q8_0 in a 1B model, and its file pages beside the packed copies were the peak.
    const int64_t chunk = std::max<int64_t>(1, (int64_t)((size_t(4) << 20) / file_group_bytes));
    for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
      const int64_t g1 = std::min(groups, g0 + chunk);
#pragma omp parallel for schedule(static)
      for (int64_t g = g0; g < g1; ++g) {
        const void* rows[kDirectRows];
        for (int i = 0; i < kDirectRows; ++i) rows[i] = m->row(g * kDirectRows + i);
        pack_rows(m->type, rows, m->cols, out + g * group_bytes);
      }
      // every row packed so far (a page across two chunks goes with the second; the pages dropped before
      // cost nothing to name again)
      if (release_file_pages(m->data, g1 * file_group_bytes, w, true) > 0) w.dropped_file_bytes += (g1 - g0) * file_group_bytes;
    }
    m->packed = out;
    out += packed_slot_bytes(*m);
  }
}

// FNV-1a over the shapes and 64 evenly spaced 64-byte samples of every weight matrix (calib's model
// fingerprint): tells two checkpoints of the same shape apart without reading gigabytes. Each matrix's
// pages are dropped once sampled: where the page cache holds the file in 2 MiB folios, a sample maps
// its whole folio, and 64 of them per matrix held most of the file (peak RSS 1541 MiB for a 1256 MiB
// Q8_0 file, 1302 MiB since).
uint64_t hash_weights(const ModelWeights& w, bool experts) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  auto sample = [&](const Matrix& m) {
    const size_t bytes = m.row_bytes * (size_t)m.rows;
    mix(&m.rows, sizeof m.rows);
    mix(&m.cols, sizeof m.cols);
    for (size_t i = 0; i < 64; ++i) {
      const size_t at = bytes > 64 ? (bytes - 64) * i / 63 : 0;
      mix(m.data + at, std::min<size_t>(64, bytes));
    }
    release_file_pages(m.data, bytes, w, false);  // the samples' pages (a 2 MiB folio each, mapped whole)
  };
  sample(w.tok_embd);
  for (auto& L : w.layers) {
    for (const Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) sample(*m);
    if (experts)  // (a dense model's fingerprint stays what it was)
      for (const Matrix* m : {&L.router, &L.exp_gate[0], &L.exp_up[0], &L.exp_down[0]}) sample(*m);
  }
  sample(w.output);
  return h;
}

}  // namespace

ModelWeights bind_weights(const ModelConfig& cfg, const TensorNames& names, const TensorLookup& lookup,
                          const std::string& src) {
  const int64_t q_dim = (int64_t)cfg.n_head * cfg.head_dim, kv_dim = (int64_t)cfg.n_head_kv * cfg.head_dim;
  ModelWeights w;
  w.tok_embd = bind_matrix(lookup, names.tok_embd, cfg.n_vocab, cfg.n_embd, src, w.owned);
  w.output_norm = bind_vector(lookup, names.output_norm, cfg.n_embd, src);
  w.output = cfg.tied_output ? w.tok_embd : bind_matrix(lookup, names.output, cfg.n_vocab, cfg.n_embd, src, w.owned);
  for (int l = 0; l < cfg.n_layer; ++l) {
    auto n = [&](const std::string& p) { return layer_name(p, l); };
    LayerWeights L;
    L.attn_norm = bind_vector(lookup, n(names.attn_norm), cfg.n_embd, src);
    if (!names.wqkv.empty() && lookup(n(names.wqkv))) {
      const Matrix qkv = bind_matrix(lookup, n(names.wqkv), q_dim + 2 * kv_dim, cfg.n_embd, src, w.owned);
      L.wq = row_slice(qkv, 0, q_dim);
      L.wk = row_slice(qkv, q_dim, kv_dim);
      L.wv = row_slice(qkv, q_dim + kv_dim, kv_dim);
    } else {
      L.wq = bind_matrix(lookup, n(names.wq), q_dim, cfg.n_embd, src, w.owned);
      L.wk = bind_matrix(lookup, n(names.wk), kv_dim, cfg.n_embd, src, w.owned);
      L.wv = bind_matrix(lookup, n(names.wv), kv_dim, cfg.n_embd, src, w.owned);
    }
    if (cfg.qkv_bias) {
      L.bq = bind_vector(lookup, n(names.bq), q_dim, src);
      L.bk = bind_vector(lookup, n(names.bk), kv_dim, src);
      L.bv = bind_vector(lookup, n(names.bv), kv_dim, src);
    }
    if (cfg.qk_norm) {
      L.q_norm = bind_vector(lookup, n(names.q_norm), cfg.head_dim, src);
      L.k_norm = bind_vector(lookup, n(names.k_norm), cfg.head_dim, src);
    }
    L.wo = bind_matrix(lookup, n(names.wo), cfg.n_embd, q_dim, src, w.owned);
    L.ffn_norm = bind_vector(lookup, n(names.ffn_norm), cfg.n_embd, src);
    if (cfg.post_norms) {
      L.post_attn_norm = bind_vector(lookup, n(names.post_attn_norm), cfg.n_embd, src);
      L.post_ffn_norm = bind_vector(lookup, n(names.post_ffn_norm), cfg.n_embd, src);
    }
    if (cfg.n_expert > 0) {
      L.router = bind_matrix(lookup, n(names.router), cfg.n_expert, cfg.n_embd, src, w.owned);
      L.exp_gate = bind_experts(lookup, n(names.exp_gate), cfg.n_expert, cfg.n_ff_exp, cfg.n_embd, src, w.owned);
      L.exp_up = bind_experts(lookup, n(names.exp_up), cfg.n_expert, cfg.n_ff_exp, cfg.n_embd, src, w.owned);
      L.exp_down = bind_experts(lookup, n(names.exp_down), cfg.n_expert, cfg.n_embd, cfg.n_ff_exp, src, w.owned);
      w.layers.push_back(std::move(L));
      continue;
    }
    if (!names.w_gate_up.empty()) {
      const Matrix gate_up = bind_matrix(lookup, n(names.w_gate_up), 2LL * cfg.n_ff, cfg.n_embd, src, w.owned);
      L.w_gate = row_slice(gate_up, 0, cfg.n_ff);
      L.w_up = row_slice(gate_up, cfg.n_ff, cfg.n_ff);
    } else {
      L.w_gate = bind_matrix(lookup, n(names.w_gate), cfg.n_ff, cfg.n_embd, src, w.owned);
      L.w_up = bind_matrix(lookup, n(names.w_up), cfg.n_ff, cfg.n_embd, src, w.owned);
    }
    L.w_down = bind_matrix(lookup, n(names.w_down), cfg.n_embd, cfg.n_ff, src, w.owned);
    w.layers.push_back(std::move(L));
  }
  return w;
}

// LoadOptions::dequantize: each matrix's rows as F32 in a copy of its own (the tied embedding once).
static void dequantize_matrices(ModelWeights& w) {
  const bool tied = w.tok_embd.data == w.output.data;
  std::vector<Matrix*> all = layer_matrices(w);
  if (!tied) all.push_back(&w.tok_embd);
  for (Matrix* m : all) {
    if (m->type == DType::F32 || m->rows == 0) continue;
    std::vector<uint8_t>& f = w.owned.emplace_back((size_t)m->rows * m->cols * sizeof(float));  // [rows][cols]
    for (int64_t r = 0; r < m->rows; ++r)
      dequantize_row(m->type, m->row(r), reinterpret_cast<float*>(f.data()) + r * m->cols, m->cols);
    *m = Matrix{DType::F32, m->rows, m->cols, (size_t)m->cols * sizeof(float), f.data(), nullptr};
  }
  if (tied) w.tok_embd = w.output;
}

namespace {

// The bytes of the model's files: a GGUF file, or a directory's safetensors shards.
size_t model_file_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    const auto n = fs::file_size(path, ec);
    return ec ? 0 : (size_t)n;  // (unknown: the loader's own error follows)
  }
  size_t bytes = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".safetensors")
      if (const auto n = e.file_size(ec); !ec) bytes += (size_t)n;
  return bytes;
}

// Weights that would take more memory than is available are refused with the sizes, before they are
// read (as a KV cache is): mapped, the system would page them in and out at every token.
void refuse_weights_over_available(const std::string& path, size_t bytes, const char* what) {
  if (const size_t have = available_memory_bytes(); over_available((double)bytes, have))
    fail(path, std::string(what) + " would take " + mib_text((double)bytes) + ", more than 90 % of the " +
                   mib_text((double)have) + " of memory available (MemAvailable, a container's limit or "
                   "FASA_MEMORY_LIMIT_MIB): not loaded");
}

// --mlock: what decoding reads locked in RAM: the packed copies and the rows read from the file (the
// norms are small heap copies, touched every step). A refusal (RLIMIT_MEMLOCK) is a warning, as llama.cpp's.
void lock_weights(ModelWeights& w, const std::string& path) {
  std::vector<std::pair<const void*, size_t>> ranges;
  if (w.packed) ranges.emplace_back(w.packed->data(), w.packed->size());
  for (const Matrix* m : all_matrices(w)) {
    const int64_t first = m->packed ? m->rows / kDirectRows * kDirectRows : 0;  // rows past the packed groups
    if (m->rows > first) ranges.emplace_back(m->row(first), (size_t)(m->rows - first) * m->row_bytes);
  }
  for (auto [p, n] : ranges) {
    if (mlock(p, n) != 0) {
      std::fprintf(stderr, "warning: %s: --mlock: cannot lock %s of weights in RAM (%s); raise the limit "
                   "(`ulimit -l`, RLIMIT_MEMLOCK) to lock them\n", path.c_str(), mib_text((double)n).c_str(),
                   std::strerror(errno));
      return;
    }
    w.locked_bytes += n;
  }
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool directory = fs::is_directory(path, ec);
  if (!directory && !fs::exists(path, ec)) fail(path, "no such file or directory");
  if (!opts.mmap) refuse_weights_over_available(path, model_file_bytes(path), "the model's files read into memory");
  std::unique_ptr<Model> m = directory ? load_hf_model(path, opts.mmap) : load_gguf_model(path, opts.mmap);
  ModelWeights& w = m->weights;
  const std::vector<Matrix*> matrices = layer_matrices(w);
  const bool pack = opts.pack_for_cpu && !opts.dequantize;
  if (pack && opts.mmap)  // (read in, they were checked above and are part of what is used now; a device holds its own)
    refuse_weights_over_available(path, std::max(m->weight_bytes(), packed_total(matrices)), "its weights");
  w.sampled_hash = hash_weights(w, m->config.n_expert > 0);
  if (opts.dequantize) {
    dequantize_matrices(w);
  } else if (pack) {
    pack_for_decode(matrices, w);
    // A tied embedding is the output's packed rows too: its lookups unpack them (ops/packed_rows.h's
    // file_row), so the file's pages of the largest matrix are not read back in token by token.
    if (w.tok_embd.data == w.output.data) w.tok_embd.packed = w.output.packed;
  }
  if (opts.mlock && opts.pack_for_cpu) lock_weights(w, path);  // (on a device: its memory, not RAM, holds them)
  return m;
}

void Model::drop_file_pages() {
  for (const Matrix* m : all_matrices(weights))  // (a packed matrix's pages are gone already)
    if (!m->packed) weights.dropped_file_bytes += release_file_pages(m->data, (size_t)m->rows * m->row_bytes, weights, false);
}

int64_t Model::n_params() const {
  const ModelConfig& c = config;
  int64_t per_layer = 2LL * c.n_embd + (int64_t)c.n_embd * c.head_dim * (2LL * c.n_head + 2LL * c.n_head_kv) +
                      (c.n_expert > 0 ? (int64_t)c.n_expert * c.n_embd * (1 + 3LL * c.n_ff_exp) : 3LL * c.n_embd * c.n_ff);
  if (c.qkv_bias) per_layer += (int64_t)c.head_dim * (c.n_head + 2LL * c.n_head_kv);
  if (c.qk_norm) per_layer += 2LL * c.head_dim;
  if (c.post_norms) per_layer += 2LL * c.n_embd;
  return (int64_t)c.n_vocab * c.n_embd * (c.tied_output ? 1 : 2) + c.n_embd + per_layer * c.n_layer;
}

size_t dense_kv_bytes(const ModelConfig& c, int64_t n_ctx) {
  const size_t row = (size_t)c.n_head_kv * c.head_dim * 2 * sizeof(uint16_t);  // K and V, F16
  size_t rows = 0;
  for (int l = 0; l < c.n_layer; ++l) rows += (size_t)(c.sliding(l) ? std::min<int64_t>(n_ctx, c.sliding_window) : n_ctx);
  return rows * row;
}

size_t Model::weight_bytes(bool one_token) const {
  auto mb = [](const Matrix& m) { return m.row_bytes * (size_t)m.rows; };
  const bool one_row = one_token && !config.tied_output;  // a step reads one embedding row (tied: the output)
  size_t b = (one_row ? weights.tok_embd.row_bytes : mb(weights.tok_embd)) + (config.tied_output ? 0 : mb(weights.output));
  for (auto& L : weights.layers) {
    b += mb(L.wq) + mb(L.wk) + mb(L.wv) + mb(L.wo) + mb(L.w_gate) + mb(L.w_up) + mb(L.w_down) + mb(L.router);
    size_t experts = 0;
    for (auto* all : {&L.exp_gate, &L.exp_up, &L.exp_down})
      for (const Matrix& m : *all) experts += mb(m);
    if (one_token && config.n_expert > 0) experts = experts / config.n_expert * config.n_expert_used;  // (alike in size)
    b += experts;
  }
  return b;
}

}  // namespace fasa
