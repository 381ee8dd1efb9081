// `fasa info [-m] MODEL`: what a user checks first about a model file.
#include <cstdio>
#include <map>

#include "calib/fc_layout.h"
#include "cli/commands.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "util/memory.h"

namespace fasa::cli {

namespace {

int info_main(const std::string& path) {
  auto m = load_model(path);
  const ModelConfig& c = m->config;
  std::map<std::string, int> types;
  auto count = [&](const Matrix& w) { types[dtype_name(w.type)]++; };
  count(m->weights.tok_embd);
  if (!c.tied_output) count(m->weights.output);
  for (auto& L : m->weights.layers) {
    for (const Matrix* w : {&L.wq, &L.wk, &L.wv, &L.wo}) count(*w);
    if (c.n_expert == 0)
      for (const Matrix* w : {&L.w_gate, &L.w_up, &L.w_down}) count(*w);
    else
      for (auto* experts : {&L.exp_gate, &L.exp_up, &L.exp_down}) count(experts->front());  // (one type for all)
  }
  std::string type_list;
  for (auto& [t, n] : types) type_list += (type_list.empty() ? "" : ", ") + t + " x" + std::to_string(n);
  std::printf("model:          %s (%s)\n", path.c_str(), m->format.c_str());
  if (c.n_expert > 0)
    std::printf("architecture:   %s, %d layers, hidden %d, %d experts of FFN %d (SwiGLU), %d per token%s\n", c.arch.c_str(),
                c.n_layer, c.n_embd, c.n_expert, c.n_ff_exp, c.n_expert_used,
                c.expert_weights_norm ? " (weights renormalised)" : "");
  else
    std::printf("architecture:   %s, %d layers, hidden %d, FFN %d (%s)%s\n", c.arch.c_str(), c.n_layer, c.n_embd, c.n_ff,
                c.gelu_ffn ? "GeGLU" : "SwiGLU", c.post_norms ? ", post-norms" : "");
  std::printf("attention:      %d query / %d KV heads (GQA %d:1), head dim %d%s\n", c.n_head, c.n_head_kv,
              c.n_head / c.n_head_kv, c.head_dim, c.qkv_bias ? ", Q/K/V bias" : "");
  if (c.sliding_window > 0) {
    const int global = c.n_global_layers();
    std::printf("sliding window: %d of %d layers see the last %d positions (RoPE base %g); %d global layers, where "
                "the --attn policy runs\n", c.n_layer - global, c.n_layer, c.sliding_window, c.rope_base_local, global);
  }
  std::printf("parameters:     %.2fM, weights %.1f MiB", m->n_params() / 1e6, m->weight_bytes() / 1048576.0);
  if (c.n_expert > 0) std::printf(" (%.1f MiB read per token)", m->weight_bytes(true) / 1048576.0);
  std::printf("\n");
  std::printf("matrix types:   %s\n", type_list.c_str());
  std::printf("memory:         weights %s held once (%s of it packed for this CPU, the rest read in place from "
              "the file); a dense F16 KV cache %.1f KiB per token, %s at the trained context; process RSS %s now\n",
              mib_text((double)m->held_weight_bytes()).c_str(), mib_text((double)m->packed_weight_bytes()).c_str(),
              dense_kv_bytes(c, 1) / 1024.0, mib_text((double)dense_kv_bytes(c, c.n_ctx_train)).c_str(),
              mib_text((double)resident_memory_bytes()).c_str());
  std::printf("context:        %d tokens (trained)\n", c.n_ctx_train);
  std::printf("RoPE:           %s layout, %d of %d dims rotary (%d frequency chunks per head), base %g, %s\n",
              rope_layout_name(c.rope_layout), c.n_rot, c.head_dim, FcLayout(c).n_fc(), c.rope_base,
              c.rope_scaling_name());
  std::printf("output:         %s\n", c.tied_output ? "tied to the embedding" : "own matrix");
  std::printf("tokenizer:      %s, %d tokens, BOS %d, EOS %d, add BOS %s\n", m->tokenizer_kind.c_str(),
              m->tokenizer.n_vocab(), m->tokenizer.bos(), m->tokenizer.eos(), m->tokenizer.add_bos() ? "yes" : "no");
  std::printf("chat template:  %s\n", describe(chat_style(*m), !m->chat_template.empty()).c_str());
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto path = std::make_shared<std::string>(FASA_DEFAULT_MODEL);
  CLI::App* cmd = app.add_subcommand("info", "Architecture, size, tensor types, RoPE and tokenizer of a model");
  auto* named = add_model_option(cmd, *path);
  cmd->add_option("model", *path, "The same, as llama.cpp's tools and earlier versions take it")->excludes(named);
  return {cmd, [path] { return info_main(*path); }};
}

}  // namespace fasa::cli
