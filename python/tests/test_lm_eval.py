"""lm-evaluation-harness (lm-eval, python/requirements-test.txt) against `fasa serve` as its
`local-completions` model, with the repo's own tasks (tools/lm-eval: one multiple-choice task scored by
log-likelihood, one generate_until task) on held-out items, under full attention and under FASA with a
small budget: item by item, the harness chooses what `fasa eval choice` / `fasa eval retrieval` choose.

The harness tokenizes through the server (its "remote" tokenizer: /tokenizer_info, /tokenize), sends token
ids without a BOS, and cannot send fasa's fields; `fasa serve --echo-policy` scores an echoed prompt under
the server's policy, and `fasa eval --no-bos` feeds what the harness feeds.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from serve import serve

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(REPO, "..", "shared")
TASKS = os.path.join(REPO, "tools", "lm-eval")
BUDGET = "24"

try:
    import lm_eval  # noqa: F401
except ImportError:
    if os.environ.get("FASA_REQUIRE_TEST_DEPS"):
        raise
    pytest.skip("lm-eval is not installed (bash scripts/install-deps.sh puts it in .venv/)", allow_module_level=True)

if not os.path.exists(os.path.join(SHARED, "eval", "heldout_kjv.txt")):
    pytest.skip(f"{SHARED}/eval (held-out text and tasks) is absent", allow_module_level=True)


def fasa(*args):
    cli = os.environ.get("FASA_CLI")
    if not cli:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    subprocess.run([cli, *args, "-t", "2"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with the items (made from held-out data) and a FASA profile of the bundled model."""
    d = tmp_path_factory.mktemp("lm-eval")
    subprocess.run([sys.executable, os.path.join(TASKS, "make_items.py"), "--out", str(d), "--shared", SHARED,
                    "--items", "16", "--per-type", "3"], check=True)
    fasa("calibrate", "-f", os.path.join(SHARED, "eval", "calibration.txt"), "-o", str(d / "profile.json"))
    return d


def harness(work, attn):
    """lm-eval's samples per task ({doc id: sample}) with `fasa serve --attn ATTN` behind it."""
    out = work / f"out-{attn}"
    with serve("--attn", attn, "--budget", BUDGET, "--profile", str(work / "profile.json"), "--echo-policy") as base:
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "lm-eval"), "run", "--model", "local-completions",
                        "--model_args", f"base_url={base}/v1/completions,model=fasa,tokenizer_backend=remote,max_retries=1",
                        "--tasks", "fasa_kjv_choice,fasa_retrieval", "--include_path", TASKS,
                        "--output_path", str(out), "--log_samples"],
                       check=True, cwd=work, env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    samples = {}
    for task in ("fasa_kjv_choice", "fasa_retrieval"):
        (path,) = glob.glob(str(out / "**" / f"samples_{task}_*.jsonl"), recursive=True)
        with open(path) as f:
            samples[task] = {s["doc"]["id"]: s for s in map(json.loads, f)}
    return samples


def fasa_answers(work, attn, command, items):
    path = work / f"{command}-{attn}.jsonl"
    fasa("eval", command, items[0], str(work / items[1]), "--attn", attn, "--budget", BUDGET,
         "--profile", str(work / "profile.json"), "--no-bos", "--answers", str(path))
    with open(path) as f:
        return {a["id"]: a for a in map(json.loads, f)}


@pytest.mark.parametrize("attn", ["full", "fasa"])
def test_harness_chooses_what_fasa_eval_chooses(work, attn):
    samples = harness(work, attn)
    choice = fasa_answers(work, attn, "choice", ("--items", "kjv_choice.jsonl"))
    retrieval = fasa_answers(work, attn, "retrieval", ("--tasks", "retrieval.jsonl"))

    assert set(samples["fasa_kjv_choice"]) == set(choice)
    for item, s in samples["fasa_kjv_choice"].items():
        harness_ll = [float(r[0]) for r in s["filtered_resps"]]
        ours = choice[item]
        assert harness_ll == pytest.approx(ours["loglikelihoods"], abs=1e-3), item
        assert max(range(len(harness_ll)), key=harness_ll.__getitem__) == ours["chosen"], item
        assert s["acc"] == float(ours["chosen"] == ours["gold"])

    assert set(samples["fasa_retrieval"]) == set(retrieval)
    for task, s in samples["fasa_retrieval"].items():
        assert s["acc"] == retrieval[task]["score"], (task, s["filtered_resps"], retrieval[task]["answer"])
