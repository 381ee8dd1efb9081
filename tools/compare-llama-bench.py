#!/usr/bin/env python3
"""fasa bench beside llama.cpp's llama-bench on the same GGUF, interleaved, as a markdown table of ratios.

  LLAMA_BENCH=/path/to/llama-bench tools/compare-llama-bench.py MODEL.gguf [-p 512[,...]] [-n 32] [-d 0,4096]
      [--pg 8192,256] [-r 5] [--inner 3] [-t 2] [--attn full[,fasa...]] [--kv-type f16|q8_0]
      [--fasa-args "..."] [--peer-once]

Each repetition runs every test in fasa, then in llama-bench (-fa 1, the same KV type for K and V via
-ctk/-ctv, the same threads, depth and token counts, --inner runs each after the tools' own warm-up),
so both see the same machine state; --fasa-args adds fasa-only options (e.g. "--budget 256 --fcs 8
--tip-int8"). llama-bench always fills the depth by a prefill, so fasa does too unless told otherwise;
the table gives the median and spread (min-max) of the repetitions' t/s and the ratio of the medians,
one row per test and fasa policy. --peer-once: for deep tests, where each llama-bench run spends most
of its time on the depth's prefill (over an hour at 32K with a Q8_0 cache on 2 threads), llama-bench
runs each test once with -r R (it prefills the depth once and restores it for every repetition),
between two fasa runs of -r R; the medians are over every repetition's t/s. The project does not build llama.cpp:
build the peer in a scratch folder (see docs) and point LLAMA_BENCH at it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out[out.index("["):])


def tests(a):
    """(label, n_prompt, n_gen, depth) of every test."""
    out = []
    for d in a.depths:
        at = f" @ d{d}" if d else ""
        for p in a.p:
            if p:
                out.append((f"pp{p}{at}", p, 0, d))
        if a.n:
            out.append((f"tg{a.n}{at}", 0, a.n, d))
        for pg in a.pg:
            n, m = (int(v) for v in pg.split(","))
            out.append((f"pp{n}+tg{m}{at}", n, m, d))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-p", type=lambda s: [int(v) for v in s.split(",")], default=[512],
                    help="prompt tokens per pp test, comma-separated (e.g. 1,2,4,8,16 for small batches)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-d", dest="depths", type=lambda s: [int(v) for v in s.split(",")], default=[0])
    ap.add_argument("--pg", action="append", default=[], help="N,M: prefill N then decode M (repeatable)")
    ap.add_argument("-r", type=int, default=5, help="repetitions (interleaved)")
    ap.add_argument("--inner", type=int, default=3, help="runs of each test per repetition and tool (their mean)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--attn", default="full", help="fasa's policies, comma-separated (llama.cpp always attends in full)")
    ap.add_argument("--kv-type", default="f16", choices=["f16", "q8_0"], help="K and V cache type of both tools")
    ap.add_argument("--fasa-args", default="", help="more options for fasa bench, space-separated")
    ap.add_argument("--fasa", default=os.path.join(ROOT, "build", "fasa"))
    ap.add_argument("--peer-once", action="store_true", help="llama-bench once per test with -r R, between two fasa runs")
    a = ap.parse_args()
    peer = os.environ.get("LLAMA_BENCH")
    if not peer or not os.path.exists(peer):
        sys.exit("set LLAMA_BENCH to a llama-bench binary (built outside this repository)")
    peer_env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(peer) + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    policies = a.attn.split(",")
    samples = {}  # (label, "llama" or a fasa policy) -> [t/s]

    def measure(label, n_prompt, n_gen, depth, reps, sides, key):
        """Runs the test in the sides asked; adds key(run's JSON row) of each to samples."""
        sizes = ["-p", str(n_prompt), "-n", str(n_gen)] if not (n_prompt and n_gen) else \
                ["-p", "0", "-n", "0", "-pg", f"{n_prompt},{n_gen}"]
        common = sizes + ["-d", str(depth), "-r", str(reps), "-t", str(a.t), "-o", "json"]
        if "fasa" in sides:
            rows = run_json([a.fasa, "bench", "-m", a.model, "--attn", a.attn, "--kv-type", a.kv_type] + common +
                            a.fasa_args.split())
            for row in rows:  # one per policy (give fasa one budget)
                samples.setdefault((label, row["attn"]), []).extend(key(row))
        if "llama" in sides:
            row = run_json([peer, "-m", a.model, "-fa", "1", "-ctk", a.kv_type, "-ctv", a.kv_type] + common,
                           env=peer_env)[0]
            samples.setdefault((label, "llama"), []).extend(key(row))
        print(f"{label}: " + ", ".join(f"{side} {statistics.median(v):.2f}" for (lb, side), v in samples.items()
                                       if lb == label) + " t/s so far", file=sys.stderr)

    for test in tests(a):
        if a.peer_once:  # fasa, llama-bench (one depth prefill), fasa: every repetition's t/s
            for sides in (["fasa"], ["llama"], ["fasa"]):
                measure(*test, a.r, sides, lambda row: row["samples_ts"])
    for rep in range(0 if a.peer_once else a.r):  # interleaved: the mean of --inner runs per repetition
        for test in tests(a):
            measure(*test, a.inner, ["fasa", "llama"], lambda row: [row["avg_ts"]])
    name = os.path.basename(a.model)
    how = f"llama-bench once with -r {a.r} between two fasa runs of -r {a.r}" if a.peer_once else \
        f"{a.r} interleaved repetitions of {a.inner} runs"
    print(f"{name}, {a.t} threads, {a.kv_type} KV, fasa {a.fasa_args} vs llama-bench -fa 1, {how}\n")
    print("| test | fasa --attn | fasa t/s median (min-max) | llama.cpp t/s median (min-max) | fasa / llama.cpp |")
    print("|---|---|---|---|---|")
    for label, *_ in tests(a):
        lm = samples[(label, "llama")]
        for pol in policies:
            f = samples[(label, pol)]
            print(f"| {label} | {pol} | {statistics.median(f):.2f} ({min(f):.2f}-{max(f):.2f}) | "
                  f"{statistics.median(lm):.2f} ({min(lm):.2f}-{max(lm):.2f}) | "
                  f"{statistics.median(f) / statistics.median(lm):.2f}x |")


if __name__ == "__main__":
    main()
