"""A Llama-architecture causal LM in the Hugging Face layout (q/k/v/o, SwiGLU, RMSNorm, half-split RoPE).

The export writes these weights unchanged to the HF directory and, with Q/K rows permuted to the
interleaved RoPE order, to GGUF (arch `llama`), so this file is the reference forward pass for both.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 4096
    dim: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2
    ffn: int = 768
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    ctx: int = 4096
    head_dim: int = 64  # may differ from dim / n_head (the grown 8K model: 8 heads of 64 over dim 256)

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


QUERY_BLOCK = 512  # queries per block of the causal attention without a fused kernel


def rope_tables(cfg, T, device):
    """cos, sin: [T, head_dim] for the half-split (rotate_half) layout."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64, device=device) / hd))
    ang = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_head * hd, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_head * hd, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_head * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        c = self.cfg
        hd = c.head_dim
        q = self.q_proj(x).view(B, T, c.n_head, hd).transpose(1, 2)      # [B, H, T, hd]
        k = self.k_proj(x).view(B, T, c.n_kv_head, hd).transpose(1, 2)   # [B, Hkv, T, hd]
        v = self.v_proj(x).view(B, T, c.n_kv_head, hd).transpose(1, 2)   # [B, Hkv, T, hd]
        q = (q * cos + rotate_half(q) * sin).type_as(v)  # f32 tables must not lift bf16 q, k to f32:
        k = (k * cos + rotate_half(k) * sin).type_as(v)  # the fused kernel would lose its flash path
        rep = c.n_head // c.n_kv_head
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch >= 2: fused kernel
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # Debian's 1.13: f32 scores in baddbmm (bias = causal mask), no bf16<->f32 casts of [T, T]
            qf = (q.float() * (1.0 / math.sqrt(hd))).reshape(B * c.n_head, T, hd)
            kf = k.float().reshape(B * c.n_head, T, hd)
            vf = v.float().reshape(B * c.n_head, T, hd)
            o = torch.cat([self.causal_block(qf, kf, vf, mask, s, min(T, s + QUERY_BLOCK))
                           for s in range(0, T, QUERY_BLOCK)], dim=1)
            o = o.view(B, c.n_head, T, hd).type_as(x)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, c.n_head * hd))


    @staticmethod
    def causal_block(q, k, v, mask, s, e):
        """Attention of queries s..e-1 over keys 0..e-1 ([B*H, e-s, hd]): the keys after a block are all
        masked, so skipping them halves the score work and memory at T=4096 (8 blocks: 36/64 of it)."""
        scores = torch.baddbmm(mask[s:e, :e].expand(q.shape[0], e - s, e), q[:, s:e], k[:, :e].transpose(1, 2))
        return torch.bmm(torch.softmax(scores, dim=-1), v[:, :e])


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, select=None):
        """ids: [B, T] -> logits [B, T, vocab]; with select ([B, T] bool), logits [n_selected, vocab]."""
        T = ids.shape[1]
        cos, sin = rope_tables(self.cfg, T, ids.device)
        mask = None  # additive causal mask, for the attention without a fused kernel only ([T, T]: 1 GB at 16K)
        if not hasattr(F, "scaled_dot_product_attention"):
            mask = torch.full((T, T), float("-inf"), device=ids.device).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        if select is not None:
            x = x[select]
        return self.lm_head(self.norm(x))


def load_hf(folder):
    """(Config, state dict) of a Llama Hugging Face directory with F32 or BF16 safetensors (e.g. kjv-tiny)."""
    import json
    import os
    import struct
    c = json.load(open(os.path.join(folder, "config.json")))
    cfg = Config(vocab=c["vocab_size"], dim=c["hidden_size"], n_layer=c["num_hidden_layers"],
                 n_head=c["num_attention_heads"], n_kv_head=c["num_key_value_heads"], ffn=c["intermediate_size"],
                 rope_theta=c["rope_theta"], norm_eps=c["rms_norm_eps"], ctx=c["max_position_embeddings"],
                 head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    raw = open(os.path.join(folder, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    sd = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}.get(v["dtype"])
        if dtype is None:
            raise ValueError(f"{folder}: tensor {k} has dtype {v['dtype']}, not BF16/F16/F32")
        t = torch.frombuffer(buf, dtype=dtype).float()
        sd[k[len("model."):] if k.startswith("model.") else k] = t.view(v["shape"])
    return cfg, sd
