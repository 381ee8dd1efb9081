// One sequence on the device: its F16 KV cache, the step's activations, and the forward pass recorded
// once (body: embedding and layers; head: final norm and output projection), submitted per token.
#include <algorithm>
#include <cstring>

#include "fasa/error.h"
#include "gpu/vulkan_model.h"
#include "ops/elementwise.h"

namespace fasa::gpu {

namespace {

uint32_t groups_of(int64_t n) { return (uint32_t)((n + 63) / 64); }  // the shaders' workgroups are 64 wide

// The push constants, as each shader declares them.
struct MatvecPush { uint32_t rows, cols, accumulate; };
struct GetRowPush { uint32_t cols; float scale; };
struct NormPush { uint32_t n, rows; float eps; };
struct RopePush { uint32_t heads, head_dim, n_rot, neox; };
struct StorePush { uint32_t heads, head_dim, n_ctx; };
struct AttentionPush { uint32_t head_dim, n_ctx, group; float scale; };
struct CountPush { uint32_t n; };

class VulkanSession final : public DeviceSession {
 public:
  VulkanSession(const VulkanModel& m, int64_t n_ctx);
  void forward(const int32_t* tokens, int n, int64_t p0, float* logits) override;

 private:
  void record_body();
  void record_head();
  void matvec(Recording& r, const DeviceMatrix& w, const Buffer& x, const Buffer& y, bool accumulate);
  void rms_norm(Recording& r, const Buffer& x, const Buffer& w, const Buffer& out, int n, int rows);

  const VulkanModel& m_;
  const ModelConfig& c_;
  VulkanDevice& dev_;
  const int64_t n_ctx_;
  Buffer step_;                    // host-visible: token, position, pad, [n_rot/2, 2] cos/sin (shaders/step.glsl)
  Buffer x_, xb_;                  // [n_embd] residual stream; normed input / projection output
  Buffer q_, att_, k_, v_;         // [n_head * head_dim], [n_head * head_dim], [n_head_kv * head_dim] x 2
  Buffer gate_, up_;               // [n_ff]
  Buffer scores_;                  // [n_head, n_ctx] attention's scratch
  Buffer logits_;                  // host-visible [n_vocab]
  std::vector<Buffer> k_cache_, v_cache_;  // [n_layer] of [n_head_kv, n_ctx, head_dim] F16
  std::unique_ptr<Recording> body_, head_;
  std::vector<float> inv_freq_;    // [n_rot/2]
};

VulkanSession::VulkanSession(const VulkanModel& m, int64_t n_ctx)
    : m_(m), c_(m.model.config), dev_(m.device), n_ctx_(n_ctx), inv_freq_(c_.rope_inv_freq()) {
  const size_t f = sizeof(float), E = c_.n_embd, qd = (size_t)c_.n_head * c_.head_dim,
               kvd = (size_t)c_.n_head_kv * c_.head_dim;
  step_ = dev_.buffer(16 + (size_t)c_.n_rot * f, true, "the step's inputs");
  x_ = dev_.buffer(E * f, false, "x");
  xb_ = dev_.buffer(E * f, false, "xb");
  q_ = dev_.buffer(qd * f, false, "q");
  att_ = dev_.buffer(qd * f, false, "attention output");
  k_ = dev_.buffer(kvd * f, false, "k");
  v_ = dev_.buffer(kvd * f, false, "v");
  gate_ = dev_.buffer((size_t)c_.n_ff * f, false, "ffn gate");
  up_ = dev_.buffer((size_t)c_.n_ff * f, false, "ffn up");
  scores_ = dev_.buffer((size_t)c_.n_head * n_ctx * f, false, "attention scores for the context");
  logits_ = dev_.buffer((size_t)c_.n_vocab * f, true, "logits");
  for (int l = 0; l < c_.n_layer; ++l) {
    const std::string what = "layer " + std::to_string(l) + "'s KV cache for the context";
    k_cache_.push_back(dev_.buffer(kvd * n_ctx * 2, false, what));
    v_cache_.push_back(dev_.buffer(kvd * n_ctx * 2, false, what));
  }
  record_body();
  record_head();
}

void VulkanSession::matvec(Recording& r, const DeviceMatrix& w, const Buffer& x, const Buffer& y, bool accumulate) {
  r.dispatch(dev_.pipeline("matvec_" + w.type, 3), {w.data.get(), &x, &y}, MatvecPush{w.rows, w.cols, accumulate},
             w.rows);
}

void VulkanSession::rms_norm(Recording& r, const Buffer& x, const Buffer& w, const Buffer& out, int n, int rows) {
  r.dispatch(dev_.pipeline("rms_norm", 3), {&x, &w, &out}, NormPush{(uint32_t)n, (uint32_t)rows, c_.rms_eps},
             (uint32_t)rows);
}

void VulkanSession::record_body() {
  body_ = dev_.record();
  Recording& r = *body_;
  const uint32_t E = c_.n_embd, D = c_.head_dim, H = c_.n_head, HKV = c_.n_head_kv, F = c_.n_ff;
  const Pipeline& rope = dev_.pipeline("rope", 2);
  const Pipeline& add = dev_.pipeline("add", 2);
  const RopePush q_rope{H, D, (uint32_t)c_.n_rot, c_.rope_layout == RopeLayout::Neox};
  const RopePush k_rope{HKV, D, (uint32_t)c_.n_rot, c_.rope_layout == RopeLayout::Neox};
  r.dispatch(dev_.pipeline("get_row_" + m_.tok_embd.type, 3), {m_.tok_embd.data.get(), &step_, &x_}, GetRowPush{E, 1.0f},
             groups_of(E));
  for (int l = 0; l < c_.n_layer; ++l) {
    const DeviceLayer& L = m_.layers[l];
    rms_norm(r, x_, L.attn_norm, xb_, E, 1);
    matvec(r, L.wq, xb_, q_, false);
    matvec(r, L.wk, xb_, k_, false);
    matvec(r, L.wv, xb_, v_, false);
    if (c_.qkv_bias) {
      r.dispatch(add, {&q_, &L.bq}, CountPush{H * D}, groups_of(H * D));
      r.dispatch(add, {&k_, &L.bk}, CountPush{HKV * D}, groups_of(HKV * D));
      r.dispatch(add, {&v_, &L.bv}, CountPush{HKV * D}, groups_of(HKV * D));
    }
    if (c_.qk_norm) {
      rms_norm(r, q_, L.q_norm, q_, D, H);
      rms_norm(r, k_, L.k_norm, k_, D, HKV);
    }
    r.dispatch(rope, {&q_, &step_}, q_rope, groups_of(H * c_.n_rot / 2));
    r.dispatch(rope, {&k_, &step_}, k_rope, groups_of(HKV * c_.n_rot / 2));
    r.dispatch(dev_.pipeline("kv_store", 5), {&k_, &step_, &v_, &k_cache_[l], &v_cache_[l]},
               StorePush{HKV, D, (uint32_t)n_ctx_}, groups_of(HKV * D));
    r.dispatch(dev_.pipeline("attention", 6), {&q_, &step_, &k_cache_[l], &v_cache_[l], &scores_, &att_},
               AttentionPush{D, (uint32_t)n_ctx_, H / HKV, c_.attention_scale()}, H);
    matvec(r, L.wo, att_, x_, true);
    rms_norm(r, x_, L.ffn_norm, xb_, E, 1);
    matvec(r, L.gate, xb_, gate_, false);
    matvec(r, L.up, xb_, up_, false);
    r.dispatch(dev_.pipeline("swiglu", 2), {&gate_, &up_}, CountPush{F}, groups_of(F));
    matvec(r, L.down, gate_, x_, true);
  }
  dev_.finish(r);
}

void VulkanSession::record_head() {
  head_ = dev_.record();
  rms_norm(*head_, x_, m_.output_norm, xb_, c_.n_embd, 1);
  matvec(*head_, m_.output, xb_, logits_, false);
  dev_.finish(*head_);
}

void VulkanSession::forward(const int32_t* tokens, int n, int64_t p0, float* logits) {
  struct Header { int32_t token, pos, pad[2]; };
  uint8_t* step = static_cast<uint8_t*>(step_.mapped());
  for (int t = 0; t < n; ++t) {
    const Header h{tokens[t], (int32_t)(p0 + t), {0, 0}};
    std::memcpy(step, &h, sizeof h);
    rope_cos_sin(inv_freq_.data(), c_.n_rot / 2, p0 + t, reinterpret_cast<float*>(step + sizeof h));
    const bool last = t == n - 1 && logits;
    if (last) dev_.run({body_.get(), head_.get()});
    else dev_.run({body_.get()});
  }
  if (logits) std::memcpy(logits, logits_.mapped(), (size_t)c_.n_vocab * sizeof(float));
}

}  // namespace

std::unique_ptr<DeviceSession> VulkanModel::start(int64_t n_ctx) const {
  return std::make_unique<VulkanSession>(*this, n_ctx);
}

}  // namespace fasa::gpu
