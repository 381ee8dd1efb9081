#!/usr/bin/env python3
"""Continuous batching of `fasa serve`, measured from outside (docs/PERFORMANCE.md, "Batches").

Starts `fasa serve` on loopback, then:
  aggregate: CLIENTS streaming clients at once (short prompts, --max-tokens greedy tokens each,
             ignore_eos): generated tokens of all of them / wall time, for each client count given;
  long:      4 clients stream while a prompt of --long-words words arrives: the longest gap between two
             chunks of any stream while that prompt is prefilled, against the streams' median gap.
Usage: tools/serve-batching.py [--fasa build/fasa] [--model M] [--clients 1,8] [--parallel 8]
                                [--max-tokens 64] [--long-words 0] [--threads 2] [--extra "ARGS"]
                                [--peer /path/to/llama-server]
--peer measures llama-server instead, with the same slots, context, threads and requests (-fa on).
Standard library only; the server is stopped at the end.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def stream_completion(port, prompt, max_tokens, arrivals):
    """POSTs a streaming completion; appends each chunk's arrival time; returns the tokens generated."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    tokens, usage = 0, None
    try:
        res = urllib.request.urlopen(req, timeout=3600)
    except urllib.error.HTTPError as e:
        sys.exit(f"HTTP {e.code}: {e.read().decode()}")
    with res:
        for line in res:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            arrivals.append(time.monotonic())
            if event.get("usage"):
                usage = event["usage"]["completion_tokens"]
            elif event.get("choices") and event["choices"][0].get("text"):
                tokens += 1  # a server that sends no usage: a chunk per token
    return usage if usage is not None else tokens


def aggregate(port, clients, max_tokens):
    results = [0] * clients
    threads = []
    start = time.monotonic()
    for i in range(clients):
        def run(i=i):
            results[i] = stream_completion(port, f"Client {i}: In the beginning God created", max_tokens, [])
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    return sum(results), wall


def long_prompt(port, words, max_tokens):
    arrivals = [[] for _ in range(4)]
    threads = [threading.Thread(target=stream_completion, args=(port, f"Stream {i}: And God said", max_tokens,
                                                                 arrivals[i])) for i in range(4)]
    for t in threads:
        t.start()
    while min(len(a) for a in arrivals) < 3:  # every stream is generating
        time.sleep(0.05)
    prompt = " ".join(["and the evening and the morning were the first day"] * (words // 10))
    t0 = time.monotonic()
    stream_completion(port, prompt, 1, [])
    t1 = time.monotonic()
    for t in threads:
        t.join()
    gaps_during, gaps = [], []
    for a in arrivals:
        for x, y in zip(a, a[1:]):
            gaps.append(y - x)
            if y > t0 and x < t1:
                gaps_during.append(y - x)
    return t1 - t0, max(gaps_during or [0]), statistics.median(gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fasa", default="build/fasa")
    ap.add_argument("--model", default="models/kjv-recall-f16.gguf")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--long-words", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=8099)
    ap.add_argument("--ctx", type=int, default=0, help="-c of the server (default: 1024 per slot, more with --long-words)")
    ap.add_argument("--extra", default="", help="more arguments for the server, e.g. '-b 64'")
    ap.add_argument("--peer", help="llama-server binary: measure it instead of fasa serve")
    a = ap.parse_args()
    ctx = a.ctx or a.parallel * max(1024, 2 * a.long_words + 512)
    common = ["-m", a.model, "--port", str(a.port), "-np", str(a.parallel), "-c", str(ctx), "-t", str(a.threads)]
    cmd = ([a.peer] + common + ["-fa", "on"] if a.peer
           else [a.fasa, "serve"] + common + ["--log-disable", "--max-tokens-limit", "100000"]) + shlex.split(a.extra)
    server = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit("the server did not start")
        for clients in [int(c) for c in a.clients.split(",") if int(c) > 0]:
            tokens, wall = aggregate(a.port, clients, a.max_tokens)
            print(f"clients {clients}: {tokens} tokens in {wall:.2f} s, aggregate {tokens / wall:.2f} tokens/s")
        if a.long_words:
            prefill, worst, median = long_prompt(a.port, a.long_words, 4 * a.max_tokens)
            print(f"long prompt ({a.long_words} words): prefilled in {prefill:.2f} s while 4 streams ran; "
                  f"their longest gap then {worst:.3f} s (median gap {median:.3f} s)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
