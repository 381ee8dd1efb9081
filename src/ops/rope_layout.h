#pragma once
// The two ways checkpoints pair a head's dims into RoPE planes (docs/FASA.md, "Frequency chunks").
namespace fasa {

// Which two dims of a head form RoPE plane i (= frequency chunk i).
enum class RopeLayout {
  Normal,  // (2i, 2i+1): GGUF arch llama (the converter permutes HF Q/K rows)
  Neox,    // (i, i + n_rot/2): Hugging Face checkpoints, GGUF qwen2
};

inline const char* rope_layout_name(RopeLayout l) { return l == RopeLayout::Normal ? "normal" : "neox"; }

}  // namespace fasa
