#!/usr/bin/env python3
"""PyTorch's side of tools/gpu-figures/run.sh: decode tokens/s of a llama of a `fasa make-model`
shape in fp16 with random weights, its KV cache at each depth (random rows), attention by
torch.nn.functional.scaled_dot_product_attention (grouped-query). PyTorch eager, one sequence: what
a researcher's own decode loop gets. One JSON line per depth on stdout."""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

# As src/bench/synthetic_model.cpp's shapes: layers, embedding, query heads, KV heads, FFN, vocabulary, RoPE theta.
SHAPES = {
    "llama3.2-1b": (16, 2048, 32, 8, 8192, 128256, 500000.0),
    "llama3.1-8b": (32, 4096, 32, 8, 14336, 128256, 500000.0),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--depths", default="0,32768,131072")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    n_layer, E, H, HKV, FF, V, theta = SHAPES[a.shape]
    D = E // H
    dev, dt = "cuda", torch.float16
    gen = torch.Generator(device=dev).manual_seed(1)

    def w(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen) * 0.02

    layers = [dict(qkv=w((H + 2 * HKV) * D, E), o=w(E, H * D), gate_up=w(2 * FF, E), down=w(E, FF)) for _ in range(n_layer)]
    emb, out = w(V, E), w(V, E)
    inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D)

    def rms(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(dt)

    def rope(x, pos):  # x [1, heads, 1, D], the rotate-half layout
        ang = pos * inv_freq
        c, s = torch.cat([ang.cos()] * 2).to(dt), torch.cat([ang.sin()] * 2).to(dt)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    for depth in [int(d) for d in a.depths.split(",")]:
        n_ctx = depth + a.steps + 4
        kc = [torch.randn(1, HKV, n_ctx, D, device=dev, dtype=dt, generator=gen) for _ in range(n_layer)]
        vc = [torch.randn(1, HKV, n_ctx, D, device=dev, dtype=dt, generator=gen) for _ in range(n_layer)]

        def step(tok, pos):
            x = emb[tok].view(1, E)
            for l, p in enumerate(layers):
                qkv = rms(x) @ p["qkv"].T
                q = qkv[:, : H * D].view(1, H, 1, D)
                k = qkv[:, H * D: (H + HKV) * D].view(1, HKV, 1, D)
                v = qkv[:, (H + HKV) * D:].view(1, HKV, 1, D)
                kc[l][:, :, pos: pos + 1] = rope(k, pos)
                vc[l][:, :, pos: pos + 1] = v
                att = F.scaled_dot_product_attention(rope(q, pos), kc[l][:, :, : pos + 1], vc[l][:, :, : pos + 1],
                                                     enable_gqa=True)
                x = x + att.reshape(1, H * D) @ p["o"].T
                gate, up = (rms(x) @ p["gate_up"].T).chunk(2, -1)
                x = x + (F.silu(gate) * up) @ p["down"].T
            return (rms(x) @ out.T).argmax(-1)

        with torch.inference_mode():
            tok = torch.tensor([5], device=dev)
            for i in range(2):  # warm-up
                tok = step(tok, depth + i)
            samples = []
            for _ in range(a.reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(a.steps):
                    tok = step(tok, depth + 2 + i)
                torch.cuda.synchronize()
                samples.append(a.steps / (time.perf_counter() - t0))
        print(json.dumps({"shape": a.shape, "n_depth": depth, "attn": "torch-sdpa", "median_ts": statistics.median(samples),
                          "samples_ts": samples, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}),
              flush=True)
        del kc, vc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
