#!/usr/bin/env python3
"""llama.cpp's outputs on `fasa make-model` shapes: the references of tests/test_architectures.cpp.

For each shape given: writes the shape's random-weight F32 GGUF (fasa make-model, seed 1) to a scratch
folder, runs llama_reference.cpp (built here against the llama.cpp checkout --llama-dir, whose build/
holds libllama) for a greedy continuation of fixed prompt ids, and writes tests/golden/arch/SHAPE.json:
  {"shape", "llama_cpp": "<llama-server --version of that build>", "prompt": [ids],
   "tokens": [16 greedy ids], "logits": {"0": [n_vocab floats], "1": [...], ..., "15": [...]}}
(the logits before each generated token).
Usage: tools/arch-references/make.py --llama-dir /path/to/llama.cpp [--fasa build/fasa] [--llama-version V] SHAPE...
"""
import argparse
import json
import os
import subprocess
import tempfile

PROMPT = [1, 229, 153, 132, 107, 104, 111, 111, 114, 229, 153, 132, 122, 114, 117, 111, 103, 300, 400, 500]
N_PREDICT = 16


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
    ap.add_argument("shapes", nargs="+")
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
