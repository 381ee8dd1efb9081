#!/usr/bin/env python3
"""tools/gpu-figures/run.sh's results (OUT/*-fasa.jsonl from `fasa bench -o jsonl`, OUT/*-torch.jsonl
from sdpa_decode.py) as one markdown table: decode tokens/s per shape and depth, median (min-max) of
the repetitions, and FASA-C's speed-up over full attention on the device and over PyTorch."""
import glob
import json
import os
import sys


def cell(row):
    if not row:
        return "-"
    s = row["samples_ts"]
    return f"{row['median_ts']:.1f} ({min(s):.1f}-{max(s):.1f})"


def main():
    out = sys.argv[1]
    print("| shape | depth | PyTorch SDPA | full (Vulkan) | FASA-C | FASA-M | FASA-C / full | FASA-C / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(out, "*-fasa.jsonl"))):
        shape = os.path.basename(path)[: -len("-fasa.jsonl")]
        rows = [json.loads(line) for line in open(path) if line.strip()]
        torch_path = os.path.join(out, shape + "-torch.jsonl")
        torch_rows = [json.loads(line) for line in open(torch_path) if line.strip()] if os.path.exists(torch_path) else []
        for depth in sorted({r["n_depth"] for r in rows}):
            at = [r for r in rows if r["n_depth"] == depth]
            full = next((r for r in at if r["attn"] == "full"), None)
            fasa_c = next((r for r in at if r["attn"] == "fasa" and not r["kv_offload"]), None)
            fasa_m = next((r for r in at if r["attn"] == "fasa" and r["kv_offload"]), None)
            pt = next((r for r in torch_rows if r["n_depth"] == depth), None)
            ratio = lambda a, b: f"{a['median_ts'] / b['median_ts']:.2f}x" if a and b else "-"
            print(f"| {shape} | {depth} | {cell(pt)} | {cell(full)} | {cell(fasa_c)} | {cell(fasa_m)} | "
                  f"{ratio(fasa_c, full)} | {ratio(fasa_c, pt)} |")


if __name__ == "__main__":
    main()
