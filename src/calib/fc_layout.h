#pragma once
// Frequency chunks (FCs): RoPE rotates each head in independent 2-D planes; plane i is FC i. Which
// two dims form it depends on the layout (docs/FASA.md §1). Dims past n_rot (partial rotary) are not
// rotated; they are paired as extra, position-free chunks.
#include <array>

#include "model/config.h"

namespace fasa {

class FcLayout {
 public:
  FcLayout(int head_dim, int n_rot, RopeLayout layout) : head_dim_(head_dim), n_rot_(n_rot), layout_(layout) {}
  explicit FcLayout(const ModelConfig& c) : FcLayout(c.head_dim, c.n_rot, c.rope_layout) {}

  int n_fc() const { return n_rot_ / 2 + (head_dim_ - n_rot_) / 2; }
  // The two model dims of chunk `fc`.
  std::array<int, 2> dims(int fc) const {
    if (fc >= n_rot_ / 2) {
      const int d = n_rot_ + 2 * (fc - n_rot_ / 2);
      return {d, d + 1};
    }
    return layout_ == RopeLayout::Normal ? std::array<int, 2>{2 * fc, 2 * fc + 1}
                                         : std::array<int, 2>{fc, fc + n_rot_ / 2};
  }

 private:
  int head_dim_, n_rot_;
  RopeLayout layout_;
};

}  // namespace fasa
