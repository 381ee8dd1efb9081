// One sequence on the device: its F16 KV cache (and FASA's K_dom planes), the activations of up to
// kPassTokens tokens, and the forward pass recorded once per shape — a decode step (one token), a
// prompt's batch (kPassTokens tokens through every matmul together, each attending densely to its
// causal rows), the heads (final norm and output projection of either's last token) — submitted as
// the tokens come. A decode step's sparse layer attends in four dispatches: FASA's new K_dom row,
// TIP's scores and each head's rows (select_rows) — or Quest's page bounds, page scores and rows
// (select_pages) —, then attention over those rows.
#include <algorithm>
#include <cstring>

#include "fasa/error.h"
#include "gpu/vulkan_model.h"
#include "ops/dtype.h"
#include "ops/elementwise.h"

namespace fasa::gpu {

namespace {

uint32_t groups_of(int64_t n) { return (uint32_t)((n + 63) / 64); }  // the shaders' workgroups are 64 wide

constexpr uint32_t kPassTokens = 32;  // a prompt's tokens per pass (shaders/step.glsl's STEP_TOKENS)
constexpr uint32_t kMatvecTile = 8;   // tokens per matvec workgroup (shaders/matvec.comp's TILE)

// The push constants, as each shader declares them.
struct MatvecPush { uint32_t rows, cols, accumulate, tokens; };
struct GetRowPush { uint32_t cols; float scale; };
struct NormPush { uint32_t n, rows; float eps; uint32_t from_row; };
struct RopePush { uint32_t heads, head_dim, n_rot, neox; };
struct StorePush { uint32_t heads, head_dim, n_ctx; };
struct AttentionPush { uint32_t head_dim, n_ctx, group; float scale; uint32_t split; };
struct MergePush { uint32_t head_dim, split; };
struct PlanePush { uint32_t heads, head_dim, n_dom, n_ctx; };
struct TipPush { uint32_t head_dim, n_dom, n_ctx, group, sink, recent, split; };
struct SelectPush { uint32_t n_ctx, sink, recent; };
struct PagePush { uint32_t heads, head_dim, n_pages, page, n_ctx; };
struct QuestPush { uint32_t head_dim, n_pages, n_ctx, group, page; };
struct PagesPush { uint32_t n_ctx, page; };
struct CountPush { uint32_t n; };
struct AddPush { uint32_t n, period; };

// What a sparse layer selects with: FASA's K_dom plane and what TIP needs to read it, or Quest's
// page bounds.
struct SparseLayer {
  uint32_t n_dom = 0;  // slots per row: the most any of the layer's KV heads has
  Buffer dims;         // [n_head_kv, n_dom] int: the model dim in each slot, -1 where a head has fewer
  Buffer mask;         // [n_head, n_dom] float: 1 where the query head scores on the slot
  Buffer plane;        // [n_head_kv, n_ctx, n_dom] F16
  Buffer bounds;       // Quest: [n_head_kv, n_pages, 2, head_dim] float per-dim min and max of each page
};

class VulkanSession final : public DeviceSession {
 public:
  VulkanSession(const VulkanModel& m, int64_t n_ctx, const DeviceSelection& selection);
  void forward(const int32_t* tokens, int n, int64_t p0, bool decode, float* logits) override;
  void fill_random(int64_t p0, int64_t n, uint64_t seed) override;
  size_t kv_bytes() const override;
  size_t host_kv_bytes() const override;
  uint64_t host_read_bytes() const override { return host_read_; }
  std::vector<std::vector<int32_t>> chosen_rows() const override;

 private:
  std::unique_ptr<Recording> record_pass(uint32_t tokens);
  std::unique_ptr<Recording> record_head(uint32_t row);
  uint32_t n_pages() const { return (uint32_t)((n_ctx_ + sel_.page - 1) / sel_.page); }  // Quest's
  void matvec(Recording& r, const DeviceMatrix& w, const Buffer& x, const Buffer& y, bool accumulate, uint32_t tokens);
  // rows x n floats from x's row from_row on, normed into out's first rows.
  void rms_norm(Recording& r, const Buffer& x, const Buffer& w, const Buffer& out, int n, int rows, uint32_t from_row = 0);
  void run_pass(const int32_t* tokens, uint32_t n, int64_t p0, bool decode, bool logits);
  void make_plane(int layer);
  void store_summaries(Recording& r, int layer, uint32_t tokens);
  void fasa_select(Recording& r, int layer);
  void quest_select(Recording& r, int layer);

  const VulkanModel& m_;
  const ModelConfig& c_;
  VulkanDevice& dev_;
  const int64_t n_ctx_;
  Buffer step_;  // host-visible: [kPassTokens] of token, position, budget, pad; [kPassTokens, n_rot/2, 2] cos/sin (shaders/step.glsl)
  // Each of the pass's tokens' row ([kPassTokens, ...]):
  Buffer x_, xb_;                  // [n_embd] residual stream; normed input / projection output
  Buffer q_, att_, k_, v_;         // [n_head * head_dim], [n_head * head_dim], [n_head_kv * head_dim] x 2
  Buffer gate_, up_;               // [n_ff]
  Buffer scores_;                  // [n_head, n_ctx] a decode step's TIP or page scores (sparse layers)
  const uint32_t split_;           // workgroups per head of a decode step's attention
  Buffer parts_;                   // [n_head, split_, head_dim + 2] their parts (shaders/attention.comp)
  Buffer logits_;                  // host-visible [n_vocab]
  std::vector<Buffer> k_cache_, v_cache_;  // [n_layer] of [n_head_kv, n_ctx, head_dim] F16
  const DeviceSelection sel_;
  std::vector<SparseLayer> sparse_;        // [n_layer]; n_dom 0 for the dense layers
  Buffer rows_, counts_;                   // [n_head, n_ctx] uint each head's chosen rows; [n_head] how many
  std::unique_ptr<Recording> step_pass_, prompt_pass_;  // one token; kPassTokens
  std::unique_ptr<Recording> step_head_, prompt_head_;  // the logits of each's last token
  std::vector<float> inv_freq_;    // [n_rot/2]
  uint64_t host_read_ = 0;         // FASA-M: K and V bytes the decode steps read from host memory
};

VulkanSession::VulkanSession(const VulkanModel& m, int64_t n_ctx, const DeviceSelection& selection)
    : m_(m), c_(m.model.config), dev_(m.device), n_ctx_(n_ctx), split_((uint32_t)std::clamp<int64_t>(n_ctx / 128, 1, 64)),
      sel_(selection), sparse_(c_.n_layer), inv_freq_(c_.rope_inv_freq()) {
  const size_t T = kPassTokens, f = sizeof(float), E = c_.n_embd, qd = (size_t)c_.n_head * c_.head_dim,
               kvd = (size_t)c_.n_head_kv * c_.head_dim;
  step_ = dev_.buffer(T * (16 + (size_t)c_.n_rot * f), true, "the pass's inputs");
  x_ = dev_.buffer(T * E * f, false, "x");
  xb_ = dev_.buffer(T * E * f, false, "xb");
  q_ = dev_.buffer(T * qd * f, false, "q");
  att_ = dev_.buffer(T * qd * f, false, "attention output");
  k_ = dev_.buffer(T * kvd * f, false, "k");
  v_ = dev_.buffer(T * kvd * f, false, "v");
  gate_ = dev_.buffer(T * c_.n_ff * f, false, "ffn gate");
  up_ = dev_.buffer(T * c_.n_ff * f, false, "ffn up");
  logits_ = dev_.buffer((size_t)c_.n_vocab * f, true, "logits");
  parts_ = dev_.buffer((size_t)c_.n_head * split_ * (c_.head_dim + 2) * f, false, "attention's parts");
  for (int l = 0; l < c_.n_layer; ++l) {
    const std::string what = "layer " + std::to_string(l) + "'s KV cache for the context";
    const bool host = sel_.host_kv && !sel_.dense[l];  // FASA-M: read by the device only where chosen
    k_cache_.push_back(dev_.buffer(kvd * n_ctx * 2, host, what));
    v_cache_.push_back(dev_.buffer(kvd * n_ctx * 2, host, what));
    if (!sel_.dense[l] && sel_.kind == DeviceSelection::Kind::Fasa) make_plane(l);
    if (!sel_.dense[l] && sel_.kind == DeviceSelection::Kind::Quest)
      sparse_[l].bounds = dev_.buffer(kvd * n_pages() * 2 * f, false, "layer " + std::to_string(l) + "'s page bounds");
  }
  if (std::find(sel_.dense.begin(), sel_.dense.end(), 0) != sel_.dense.end()) {
    scores_ = dev_.buffer((size_t)c_.n_head * n_ctx * f, false, "the selection's scores for the context");
    rows_ = dev_.buffer((size_t)c_.n_head * n_ctx * 4, false, "the chosen rows");
    counts_ = dev_.buffer((size_t)c_.n_head * 4, false, "the chosen rows' counts");
  }
  step_pass_ = record_pass(1);
  prompt_pass_ = record_pass(kPassTokens);
  step_head_ = record_head(0);
  prompt_head_ = record_head(kPassTokens - 1);
}

void VulkanSession::matvec(Recording& r, const DeviceMatrix& w, const Buffer& x, const Buffer& y, bool accumulate,
                           uint32_t tokens) {
  r.dispatch(dev_.pipeline("matvec_" + w.type, 3), {w.data.get(), &x, &y},
             MatvecPush{w.rows, w.cols, accumulate, tokens}, w.rows, (tokens + kMatvecTile - 1) / kMatvecTile);
}

void VulkanSession::rms_norm(Recording& r, const Buffer& x, const Buffer& w, const Buffer& out, int n, int rows,
                             uint32_t from_row) {
  r.dispatch(dev_.pipeline("rms_norm", 3), {&x, &w, &out}, NormPush{(uint32_t)n, (uint32_t)rows, c_.rms_eps, from_row},
             (uint32_t)rows);
}

void VulkanSession::make_plane(int l) {
  const int HKV = c_.n_head_kv, H = c_.n_head, group = H / HKV;
  SparseLayer& s = sparse_[l];
  for (int g = 0; g < HKV; ++g) s.n_dom = std::max<uint32_t>(s.n_dom, sel_.layouts[(size_t)l * HKV + g].n_dom);
  if (s.n_dom == 0) throw Error("Vulkan: layer " + std::to_string(l) + " is sparse but has no K_dom plane");
  std::vector<int32_t> dims((size_t)HKV * s.n_dom, -1);
  std::vector<float> mask((size_t)H * s.n_dom, 0.0f);
  for (int g = 0; g < HKV; ++g) {
    const KeyLayout& layout = sel_.layouts[(size_t)l * HKV + g];
    for (int j = 0; j < layout.n_dom; ++j) dims[(size_t)g * s.n_dom + j] = layout.perm[j];
  }
  for (int h = 0; h < H; ++h)
    for (int j : sel_.scored[(size_t)l * H + h]) {
      if (j < 0 || j >= sel_.layouts[(size_t)l * HKV + h / group].n_dom) throw Error("Vulkan: a scored dim is outside K_dom");
      mask[(size_t)h * s.n_dom + j] = 1.0f;
    }
  const std::string what = "layer " + std::to_string(l) + "'s K_dom plane";
  s.dims = dev_.buffer(dims.size() * 4, false, what);
  dev_.upload(s.dims, dims.data(), dims.size() * 4);
  s.mask = dev_.buffer(mask.size() * 4, false, what);
  dev_.upload(s.mask, mask.data(), mask.size() * 4);
  s.plane = dev_.buffer((size_t)HKV * n_ctx_ * s.n_dom * 2, false, what + " for the context");
}

// What a sparse layer selects on, for the pass's new keys (kv_store wrote them to the cache just
// before): FASA's K_dom rows, or the bounds of Quest's pages they fall in.
void VulkanSession::store_summaries(Recording& r, int l, uint32_t tokens) {
  const SparseLayer& s = sparse_[l];
  const uint32_t D = c_.head_dim, HKV = c_.n_head_kv, n_ctx = (uint32_t)n_ctx_;
  if (sel_.kind == DeviceSelection::Kind::Fasa)
    r.dispatch(dev_.pipeline("kdom_store", 4), {&k_, &step_, &s.dims, &s.plane}, PlanePush{HKV, D, s.n_dom, n_ctx},
               groups_of(HKV * s.n_dom), tokens);
  else
    r.dispatch(dev_.pipeline("page_bounds", 3), {&k_cache_[l], &step_, &s.bounds},
               PagePush{HKV, D, n_pages(), (uint32_t)sel_.page, n_ctx}, groups_of(HKV * D), tokens);
}

// FASA's rows at a sparse layer in a decode step: TIP over the plane, each head's top rows within
// the step's budget.
void VulkanSession::fasa_select(Recording& r, int l) {
  const SparseLayer& s = sparse_[l];
  const uint32_t D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, n_ctx = (uint32_t)n_ctx_;
  const uint32_t sink = sel_.sink, recent = sel_.recent;
  const uint32_t split = (uint32_t)std::clamp<int64_t>(n_ctx_ / 1024, 1, 64);  // workgroups per head in TIP
  r.dispatch(dev_.pipeline("tip", 6), {&q_, &step_, &s.plane, &s.dims, &s.mask, &scores_},
             TipPush{D, s.n_dom, n_ctx, H / HKV, sink, recent, split}, H * split);
  r.dispatch(dev_.pipeline("select_rows", 4), {&scores_, &step_, &rows_, &counts_}, SelectPush{n_ctx, sink, recent}, H);
}

// Quest's rows at a sparse layer in a decode step: each complete page's bound on each head's
// scores, the newest page and the best pages within the step's budget.
void VulkanSession::quest_select(Recording& r, int l) {
  const SparseLayer& s = sparse_[l];
  const uint32_t D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, P = sel_.page;
  r.dispatch(dev_.pipeline("quest_scores", 4), {&q_, &step_, &s.bounds, &scores_},
             QuestPush{D, n_pages(), (uint32_t)n_ctx_, H / HKV, P}, H);
  r.dispatch(dev_.pipeline("select_pages", 4), {&scores_, &step_, &rows_, &counts_}, PagesPush{(uint32_t)n_ctx_, P}, H);
}

// The forward pass of `tokens` tokens (1: a decode step, whose sparse layers select; kPassTokens: a
// prompt's batch, every layer dense, FASA's planes and Quest's bounds kept up to date) up to the
// last layer's residual stream.
std::unique_ptr<Recording> VulkanSession::record_pass(uint32_t tokens) {
  auto pass = dev_.record();
  Recording& r = *pass;
  const uint32_t T = tokens, E = c_.n_embd, D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, F = c_.n_ff;
  const bool decode = T == 1;
  const Pipeline& rope = dev_.pipeline("rope", 2);
  const Pipeline& add = dev_.pipeline("add", 2);
  const RopePush q_rope{H, D, (uint32_t)c_.n_rot, c_.rope_layout == RopeLayout::Neox};
  const RopePush k_rope{HKV, D, (uint32_t)c_.n_rot, c_.rope_layout == RopeLayout::Neox};
  // A decode step's attention in split_ parts a head, merged; a prompt's tokens each in one.
  const uint32_t split = decode ? split_ : 1;
  const AttentionPush attention{D, (uint32_t)n_ctx_, H / HKV, c_.attention_scale(), split};
  r.dispatch(dev_.pipeline("get_row_" + m_.tok_embd.type, 3), {m_.tok_embd.data.get(), &step_, &x_}, GetRowPush{E, 1.0f},
             groups_of(E), T);
  for (int l = 0; l < c_.n_layer; ++l) {
    const DeviceLayer& L = m_.layers[l];
    const bool select = decode && !sel_.dense[l];
    rms_norm(r, x_, L.attn_norm, xb_, E, T);
    matvec(r, L.wq, xb_, q_, false, T);
    matvec(r, L.wk, xb_, k_, false, T);
    matvec(r, L.wv, xb_, v_, false, T);
    if (c_.qkv_bias) {
      r.dispatch(add, {&q_, &L.bq}, AddPush{T * H * D, H * D}, groups_of(T * H * D));
      r.dispatch(add, {&k_, &L.bk}, AddPush{T * HKV * D, HKV * D}, groups_of(T * HKV * D));
      r.dispatch(add, {&v_, &L.bv}, AddPush{T * HKV * D, HKV * D}, groups_of(T * HKV * D));
    }
    if (c_.qk_norm) {
      rms_norm(r, q_, L.q_norm, q_, D, T * H);
      rms_norm(r, k_, L.k_norm, k_, D, T * HKV);
    }
    r.dispatch(rope, {&q_, &step_}, q_rope, groups_of(H * c_.n_rot / 2), T);
    r.dispatch(rope, {&k_, &step_}, k_rope, groups_of(HKV * c_.n_rot / 2), T);
    r.dispatch(dev_.pipeline("kv_store", 5), {&k_, &step_, &v_, &k_cache_[l], &v_cache_[l]},
               StorePush{HKV, D, (uint32_t)n_ctx_}, groups_of(HKV * D), T);
    if (!sel_.dense[l]) store_summaries(r, l, T);
    if (select) {
      if (sel_.kind == DeviceSelection::Kind::Fasa) fasa_select(r, l);
      else quest_select(r, l);
      r.dispatch(dev_.pipeline("attention_sparse", 8),
                 {&q_, &step_, &k_cache_[l], &v_cache_[l], &att_, &parts_, &rows_, &counts_}, attention, H * split);
    } else {
      r.dispatch(dev_.pipeline("attention", 6), {&q_, &step_, &k_cache_[l], &v_cache_[l], &att_, &parts_}, attention,
                 H * split, T);
    }
    if (split > 1) r.dispatch(dev_.pipeline("attention_merge", 2), {&parts_, &att_}, MergePush{D, split}, H);
    matvec(r, L.wo, att_, x_, true, T);
    rms_norm(r, x_, L.ffn_norm, xb_, E, T);
    matvec(r, L.gate, xb_, gate_, false, T);
    matvec(r, L.up, xb_, up_, false, T);
    r.dispatch(dev_.pipeline("swiglu", 2), {&gate_, &up_}, CountPush{T * F}, groups_of(T * F));
    matvec(r, L.down, gate_, x_, true, T);
  }
  dev_.finish(r);
  return pass;
}

// The final norm of token `row`'s residual stream and the output projection.
std::unique_ptr<Recording> VulkanSession::record_head(uint32_t row) {
  auto head = dev_.record();
  rms_norm(*head, x_, m_.output_norm, xb_, c_.n_embd, 1, row);
  matvec(*head, m_.output, xb_, logits_, false, 1);
  dev_.finish(*head);
  return head;
}

size_t VulkanSession::kv_bytes() const {
  size_t bytes = 0;
  for (int l = 0; l < c_.n_layer; ++l)
    bytes += sparse_[l].plane.bytes() + (sel_.host_kv && !sel_.dense[l] ? 0 : k_cache_[l].bytes() + v_cache_[l].bytes());
  return bytes;
}

size_t VulkanSession::host_kv_bytes() const {
  size_t bytes = 0;
  for (int l = 0; l < c_.n_layer; ++l)
    if (sel_.host_kv && !sel_.dense[l]) bytes += k_cache_[l].bytes() + v_cache_[l].bytes();
  return bytes;
}

// Made on the host a layer at a time (its KV heads' rows on all threads), then uploaded head by head:
// K and V rows, their K_dom slots, and the bounds of Quest's pages (which must then start at p0).
void VulkanSession::fill_random(int64_t p0, int64_t n, uint64_t seed) {
  const int D = c_.head_dim, HKV = c_.n_head_kv;
  const size_t P = (size_t)sel_.page;
  if (p0 < 0 || n < 0 || p0 + n > n_ctx_) throw Error("fill: rows outside the device's cache");
  if (sel_.kind == DeviceSelection::Kind::Quest && p0 % sel_.page != 0)
    throw Error("fill: Quest's pages on the device are filled from a page's first row");
  const size_t head_values = (size_t)n * D;
  std::vector<uint16_t> ks(HKV * head_values), vs(HKV * head_values), plane;  // [HKV, n, D] x 2, [n, n_dom]
  std::vector<float> bounds;                                                  // [pages, 2, D]
  for (int l = 0; l < c_.n_layer; ++l) {
#pragma omp parallel for
    for (int g = 0; g < HKV; ++g) {
      FillStream stream(seed, l, g);  // (the CPU's fill_random's values)
      for (size_t i = g * head_values; i < (g + 1) * head_values; ++i)
        ks[i] = fp32_to_fp16(stream.next()), vs[i] = fp32_to_fp16(stream.next());
    }
    for (int g = 0; g < HKV; ++g) {
      const uint16_t* k = ks.data() + g * head_values;
      const size_t row0 = (size_t)g * n_ctx_ + p0;  // the head's row p0 in [HKV, n_ctx, ...] planes
      dev_.upload(k_cache_[l], k, head_values * 2, row0 * D * 2);
      dev_.upload(v_cache_[l], vs.data() + g * head_values, head_values * 2, row0 * D * 2);
      const SparseLayer& sl = sparse_[l];
      if (sl.n_dom > 0) {
        const KeyLayout& layout = sel_.layouts[(size_t)l * HKV + g];
        plane.assign((size_t)n * sl.n_dom, 0);
        for (int64_t r = 0; r < n; ++r)
          for (int j = 0; j < layout.n_dom; ++j) plane[r * sl.n_dom + j] = k[r * D + layout.perm[j]];
        dev_.upload(sl.plane, plane.data(), plane.size() * 2, row0 * sl.n_dom * 2);
      }
      if (sl.bounds.bytes() > 0 && n > 0) {
        const size_t pages = ((size_t)n + P - 1) / P;
        bounds.assign(pages * 2 * D, 0.0f);
        for (size_t pg = 0; pg < pages; ++pg)
          for (int d = 0; d < D; ++d) {
            float lo = INFINITY, hi = -INFINITY;
            for (size_t r = pg * P; r < std::min<size_t>((pg + 1) * P, n); ++r)
              lo = std::min(lo, fp16_to_fp32(k[r * D + d])), hi = std::max(hi, fp16_to_fp32(k[r * D + d]));
            bounds[(pg * 2) * D + d] = lo;
            bounds[(pg * 2 + 1) * D + d] = hi;
          }
        dev_.upload(sl.bounds, bounds.data(), bounds.size() * 4, (((size_t)g * n_pages() + p0 / P) * 2 * D) * 4);
      }
    }
  }
}

std::vector<std::vector<int32_t>> VulkanSession::chosen_rows() const {
  if (rows_.bytes() == 0) return {};
  std::vector<uint32_t> counts(c_.n_head), rows(rows_.bytes() / 4);  // [n_head], [n_head, n_ctx]
  dev_.download(counts_, counts.data(), counts_.bytes());
  dev_.download(rows_, rows.data(), rows_.bytes());
  std::vector<std::vector<int32_t>> chosen(c_.n_head);
  for (int h = 0; h < c_.n_head; ++h) {
    const uint32_t* first = rows.data() + (size_t)h * n_ctx_;
    chosen[h].assign(first, first + std::min<int64_t>(counts[h], n_ctx_));
  }
  return chosen;
}

void VulkanSession::forward(const int32_t* tokens, int n, int64_t p0, bool decode, float* logits) {
  int t = 0;
  // A prompt kPassTokens at a time, the rest one by one; the last pass leaves the logits.
  for (; !decode && n - t >= (int)kPassTokens; t += kPassTokens)
    run_pass(tokens + t, kPassTokens, p0 + t, false, t + (int)kPassTokens == n && logits);
  for (; t < n; ++t) run_pass(tokens + t, 1, p0 + t, decode, t == n - 1 && logits);
  if (logits) std::memcpy(logits, logits_.mapped(), (size_t)c_.n_vocab * sizeof(float));
}

// Writes the n tokens' step inputs and submits the pass of n (1 or kPassTokens), with the head
// where `logits`.
void VulkanSession::run_pass(const int32_t* tokens, uint32_t n, int64_t p0, bool decode, bool logits) {
  struct Header { int32_t token, pos, budget, pad; };  // shaders/step.glsl
  uint8_t* step = static_cast<uint8_t*>(step_.mapped());
  float* cos_sin = reinterpret_cast<float*>(step + kPassTokens * sizeof(Header));
  for (uint32_t t = 0; t < n; ++t) {
    const int64_t pos = p0 + t;
    // Of pos + 1 rows; a prompt's tokens take them all (dense, as the CPU's prefill).
    const int64_t budget = decode ? std::min<int64_t>(sel_.budget.tokens(pos + 1), INT32_MAX) : INT32_MAX;
    const Header h{tokens[t], (int32_t)pos, (int32_t)budget, 0};
    std::memcpy(step + t * sizeof h, &h, sizeof h);
    rope_cos_sin(inv_freq_.data(), c_.n_rot / 2, pos, cos_sin + (size_t)t * c_.n_rot);
    if (sel_.host_kv && decode)  // each query head reads its rows' K and V (all while the budget covers the cache)
      host_read_ += (uint64_t)std::min<int64_t>(budget, pos + 1) * c_.n_head * c_.head_dim * 2 * 2 *
                    std::count(sel_.dense.begin(), sel_.dense.end(), 0);
  }
  const Recording* pass = n == 1 ? step_pass_.get() : prompt_pass_.get();
  if (logits) dev_.run({pass, n == 1 ? step_head_.get() : prompt_head_.get()});
  else dev_.run({pass});
}

}  // namespace

std::unique_ptr<DeviceSession> VulkanModel::start(int64_t n_ctx, const DeviceSelection& selection) const {
  return std::make_unique<VulkanSession>(*this, n_ctx, selection);
}

}  // namespace fasa::gpu
