"""Grows a trained model into a larger one that computes (almost) the same function, so that a CPU run
starts from the shipped model's skills instead of from scratch (issue 41: Llama-3's grouping, more layers).

- More query heads per KV head: each KV head's query heads are copied; a copy and its original each
  take half of the original's output projection, so their sum is the original's output. A little noise
  on the copies' query rows lets them drift apart (identical heads would get identical updates forever).
- More layers: new layers spread between the old ones, their output projections (attention's o_proj
  and the MLP's down_proj) zero, so each adds nothing to the residual stream until it has trained.
"""
import torch

from model import Config, Llama

QUERY_NOISE = 0.02  # the copies' query rows get this share of the rows' own spread as noise


def layer_sources(src_layers, n_layer):
    """For each new layer, the old layer it continues (None: a new, identity layer), old ones in order."""
    placed = {i * n_layer // src_layers: i for i in range(src_layers)}
    return [placed.get(i) for i in range(n_layer)]


def grow(sd, src: Config, cfg: Config, seed=0):
    """src's state dict -> a state dict of the shape cfg (same vocabulary, width, KV heads, head dim)."""
    for field in ("vocab", "dim", "n_kv_head", "head_dim", "ffn"):
        if getattr(src, field) != getattr(cfg, field):
            raise ValueError(f"grow: {field} differs ({getattr(src, field)} -> {getattr(cfg, field)})")
    g_src, g_new = src.n_head // src.n_kv_head, cfg.n_head // cfg.n_kv_head
    if g_new % g_src or cfg.n_layer < src.n_layer:
        raise ValueError(f"grow: {src.n_head}/{src.n_kv_head} heads x {src.n_layer} layers -> "
                         f"{cfg.n_head}/{cfg.n_kv_head} x {cfg.n_layer}: needs a multiple of the grouping, no fewer layers")
    copies, hd = g_new // g_src, cfg.head_dim
    torch.manual_seed(seed)
    out = Llama(cfg).state_dict()  # fresh weights for what the old model has no counterpart of
    for k in ("embed_tokens.weight", "norm.weight", "lm_head.weight"):
        out[k] = sd[k].clone()
    for i, j in enumerate(layer_sources(src.n_layer, cfg.n_layer)):
        p = f"layers.{i}."
        if j is None:
            out[p + "self_attn.o_proj.weight"].zero_()
            out[p + "mlp.down_proj.weight"].zero_()
            continue
        q = p + "self_attn.q_proj.weight"
        o = p + "self_attn.o_proj.weight"
        for k, v in sd.items():
            if k.startswith(f"layers.{j}."):
                out[p + k[len(f"layers.{j}."):]] = v.clone()
        q_old = sd[f"layers.{j}.self_attn.q_proj.weight"].view(src.n_kv_head, g_src, hd, cfg.dim)   # [kv, g, hd, dim]
        o_old = sd[f"layers.{j}.self_attn.o_proj.weight"].view(cfg.dim, src.n_kv_head, g_src, hd)   # [dim, kv, g, hd]
        q_new = q_old.unsqueeze(1).repeat(1, copies, 1, 1, 1)                                        # [kv, c, g, hd, dim]
        q_new[:, 1:] += torch.randn_like(q_new[:, 1:]) * QUERY_NOISE * q_old.std()
        out[q] = q_new.reshape(cfg.n_head * hd, cfg.dim)
        out[o] = (o_old.unsqueeze(2).repeat(1, 1, copies, 1, 1) / copies).reshape(cfg.dim, cfg.n_head * hd)
    return out
