#!/usr/bin/env python3
"""llama.cpp's outputs on `fasa make-model` shapes: the references of tests/test_architectures.cpp.

For each shape given: writes the shape's random-weight F32 GGUF (fasa make-model, seed 1) to a scratch
folder, runs llama_reference.cpp (built here against the llama.cpp checkout --llama-dir, whose build/
holds libllama) for a greedy continuation of fixed prompt ids, and writes tests/golden/arch/SHAPE.json:
  {"shape", "llama_cpp": "<llama-server --version of that build>", "prompt": [ids],
   "tokens": [16 greedy ids], "logits": {"0": [n_vocab floats], "1": [...], ..., "15": [...]}}
(the logits before each generated token).
With --real NAME=MODEL.gguf (repeatable; the real models of scripts/get-models.sh): llama.cpp's greedy
continuation of REAL_PROMPTS[NAME] as it tokenizes it, written to tests/golden/real/NAME.json as
  {"model", "sha256", "llama_cpp", "text", "prompt": [ids], "ids": [vocabulary sample],
   "runs": {RUN: {"tokens": [32 greedy ids], "top2_gap": [per step], "logits": {"0": [...], ..., "3": [...]}}}}
for three runs: "types" (the file as it is, llama.cpp's defaults), "types_no_flash_attn" (its other
attention path: how far llama.cpp is from itself) and "f32" (the file turned into F32 by llama-quantize:
float activations, no int8 rounding to amplify small differences). The logits of the first
REAL_LOGIT_STEPS steps are kept at a sample of the vocabulary (every stride-th id and each step's 64
largest), so that a 262144-token vocabulary stays small on disk.
Usage: tools/arch-references/make.py --llama-dir /path/to/llama.cpp [--fasa build/fasa] [--llama-version V]
       [--real NAME=MODEL.gguf]... [SHAPE...]
"""
import argparse
import hashlib
import json
import os
import subprocess
import tempfile

PROMPT = [1, 229, 153, 132, 107, 104, 111, 111, 114, 229, 153, 132, 122, 114, 117, 111, 103, 300, 400, 500]
N_PREDICT = 16

# A chat turn in the model's own format (SmolLM2-Instruct: ChatML) and code (Gemma 3 270M is a base model; its
# continuations of running prose come to near ties, top-2 gaps of 0.003-0.05, within 32 tokens).
REAL_PROMPTS = {
    "smollm2-135m-instruct-q4_1": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                                  "<|im_end|>\n<|im_start|>user\nWhat is the tallest mountain on Earth, and how high is it?"
                                  "<|im_end|>\n<|im_start|>assistant\n",
    "gemma-3-270m-q4_k_m": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
}
REAL_PREDICT = 32
REAL_LOGIT_STEPS = 4
REAL_SAMPLE = 4096  # about this many ids at a fixed stride, plus each kept step's top 64


def real_run(tool, gguf, text, flags=()):
    run = subprocess.run([tool, gguf, str(REAL_PREDICT), *flags, "--text", text], capture_output=True, text=True,
                         check=True)
    return json.loads(run.stdout)


def real_reference(tool, quantize, name, gguf, version, tmp):
    f32 = os.path.join(tmp, name + "-f32.gguf")
    subprocess.run([quantize, "--allow-requantize", gguf, f32, "F32"], capture_output=True, check=True)
    text = REAL_PROMPTS[name]
    runs = {"types": real_run(tool, gguf, text), "types_no_flash_attn": real_run(tool, gguf, text, ["--no-flash-attn"]),
            "f32": real_run(tool, f32, text)}
    n_vocab = len(runs["types"]["steps"][0]["logits"])
    ids = set(range(0, n_vocab, max(1, n_vocab // REAL_SAMPLE)))
    for run in runs.values():
        for step in run["steps"][:REAL_LOGIT_STEPS]:
            ids.update(sorted(range(n_vocab), key=lambda v: -step["logits"][v])[:64])
    ids = sorted(ids)
    with open(gguf, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()

    def kept(run):
        steps = run["steps"]
        gaps = [round(-(lambda top: top[1] - top[0])(sorted(s["logits"], reverse=True)[:2]), 4) for s in steps]
        return {"tokens": [s["token"] for s in steps], "top2_gap": gaps,
                "logits": {str(i): [steps[i]["logits"][v] for v in ids] for i in range(REAL_LOGIT_STEPS)}}

    return {"model": os.path.basename(gguf), "sha256": sha, "llama_cpp": version, "text": text,
            "prompt": runs["types"]["prompt"], "ids": ids, "runs": {k: kept(v) for k, v in runs.items()}}


def build_reference_tool(llama_dir, out):
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(llama_dir, "build", "bin")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(llama_dir, "include"), "-I",
                    os.path.join(llama_dir, "ggml", "include"), os.path.join(here, "llama_reference.cpp"), "-L", lib,
                    "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", out], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-dir", required=True)
    ap.add_argument("--fasa", default="build/fasa")
    ap.add_argument("--llama-version", help="what to record as llama.cpp's version (default: llama-server --version)")
    ap.add_argument("--real", action="append", default=[], metavar="NAME=MODEL.gguf")
    ap.add_argument("shapes", nargs="*")
    a = ap.parse_args()
    version = a.llama_version
    try:  # "version: B (COMMIT)" of the same build
        v = subprocess.run([os.path.join(a.llama_dir, "build", "bin", "llama-server"), "--version"],
                           capture_output=True, text=True)
        version = version or next(line for line in (v.stdout + v.stderr).splitlines() if line.startswith("version"))
    except (OSError, StopIteration):
        version = version or os.path.abspath(a.llama_dir)
    os.makedirs("tests/golden/arch", exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tool = os.path.join(tmp, "llama_reference")
        build_reference_tool(a.llama_dir, tool)
        for real in a.real:
            name, gguf = real.split("=", 1)
            out = real_reference(tool, os.path.join(a.llama_dir, "build", "bin", "llama-quantize"), name, gguf, version,
                                 tmp)
            os.makedirs("tests/golden/real", exist_ok=True)
            with open(f"tests/golden/real/{name}.json", "w") as f:
                json.dump(out, f)
                f.write("\n")
            for run, r in out["runs"].items():
                print(f"{name} {run}: {len(out['prompt'])} prompt tokens, {r['tokens']}, least top-2 gap {min(r['top2_gap'])}")
        for shape in a.shapes:
            gguf = os.path.join(tmp, shape + ".gguf")
            subprocess.run([a.fasa, "make-model", "--shape", shape, "--type", "f32", "-o", gguf, "--seed", "1"],
                           check=True)
            run = subprocess.run([tool, gguf, str(N_PREDICT)] + [str(t) for t in PROMPT], capture_output=True,
                                 text=True, check=True)
            steps = json.loads(run.stdout)["steps"]
            out = {"shape": shape, "llama_cpp": version, "prompt": PROMPT, "tokens": [s["token"] for s in steps],
                   "logits": {str(i): step["logits"] for i, step in enumerate(steps)}}
            with open(f"tests/golden/arch/{shape}.json", "w") as f:
                json.dump(out, f)
                f.write("\n")
            print(f"{shape}: {out['tokens']}")


if __name__ == "__main__":
    main()
