"""The Python module against the CLI and the C++ API's contracts, on the bundled model."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import fasa

PROMPT = "Ge1:1 In the beginning"
CLI = os.environ.get("FASA_CLI")


@pytest.fixture(scope="module")
def engine():
    return fasa.Engine()


def cli(*args):
    if not CLI:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def test_generation_equals_the_cli(engine):
    got = engine.context().generate(PROMPT, max_tokens=8)
    run = cli("run", "-p", PROMPT, "-n", "8", "--no-display-prompt")
    assert run.returncode == 0, run.stderr
    assert got == run.stdout.rstrip("\n")
    assert len(got) > 0


def test_fasa_with_the_same_settings_equals_the_cli(engine):
    got = engine.context(attn="fasa", budget=8, fcs=4, dense_layers=[], synthetic_profile=True).generate(
        PROMPT * 4, max_tokens=12)
    run = cli("run", "-p", PROMPT * 4, "-n", "12", "--no-display-prompt", "--attn", "fasa", "--budget", "8",
              "--fcs", "4", "--dense-layers", "", "--synthetic-profile")
    assert run.returncode == 0, run.stderr
    assert got == run.stdout.rstrip("\n")


def test_a_model_read_into_memory_and_locked_generates_the_mapped_ones_text(engine, capfd):
    # mmap=False, mlock=True as `fasa run --no-mmap --mlock`: locked, or a warning says why not
    read_in = fasa.Engine(mmap=False, mlock=True)
    if read_in.info["locked_weight_bytes"] == 0:
        assert "--mlock: cannot lock" in capfd.readouterr().err
    assert engine.info["locked_weight_bytes"] == 0
    assert read_in.context().generate(PROMPT, max_tokens=12) == engine.context().generate(PROMPT, max_tokens=12)


def test_the_engine_on_the_gpu_generates_the_cpus_text(engine):
    # gpu_layers as `fasa run -ngl`: the whole model on Vulkan device 0 (Mesa's lavapipe in CI).
    try:
        gpu = fasa.Engine(gpu_layers=99)
    except fasa.Error as e:
        if os.environ.get("FASA_REQUIRE_VULKAN"):
            raise
        pytest.skip(f"no Vulkan device: {e}")
    assert gpu.info["device"].startswith("Vulkan0"), gpu.info["device"]
    assert engine.info["device"] == "CPU"
    assert gpu.context().generate(PROMPT, max_tokens=12) == engine.context().generate(PROMPT, max_tokens=12)


def test_the_stream_yields_the_blocking_calls_text(engine):
    blocking = engine.context().generate(PROMPT, max_tokens=24)
    pieces = list(engine.context().stream(PROMPT, max_tokens=24))
    assert len(pieces) > 1
    assert "".join(pieces) == blocking


def test_a_stream_dropped_early_leaves_the_context_usable(engine):
    ctx = engine.context()
    stream = ctx.stream(PROMPT, max_tokens=50)
    next(stream)
    del stream
    assert ctx.generate(" and", max_tokens=4)


def test_every_policy_with_a_budget_covering_the_context_equals_dense(engine):
    prompt = " ".join([PROMPT] * 6)
    dense = engine.context()
    want = dense.generate(prompt, max_tokens=16)
    want_logits = dense.logits()
    for p in fasa.policies():
        ctx = engine.context(attn=p["name"], budget=100000, synthetic_profile=True)
        assert ctx.generate(prompt, max_tokens=16) == want, p["name"]
        np.testing.assert_allclose(ctx.logits(), want_logits, rtol=0, atol=1e-4, err_msg=p["name"])


def test_bad_settings_raise_the_clis_message(engine):
    with pytest.raises(fasa.Error) as e:
        engine.context(budget=2.5)
    run = cli("run", "--budget", "2.5", "-p", "x", "-n", "1")
    assert run.returncode != 0
    assert f"error: {e.value}" in run.stderr
    assert str(e.value).startswith("budget: ")
    with pytest.raises(fasa.Error, match="fc_sharing: must be 'head' or 'group'"):
        engine.context(fc_sharing="both")
    with pytest.raises(fasa.Error, match="fc_rank: must be 'auto' or 'agreement' or 'magnitude'"):
        engine.context(fc_rank="loudest")
    with pytest.raises(fasa.Error, match="no setting 'budgte'"):
        engine.context(budgte=8)
    with pytest.raises(fasa.Error, match="unknown attention policy .nope."):
        engine.context(attn="nope").generate(PROMPT, max_tokens=1)


def test_one_bad_budget_one_message_from_cli_server_and_python(engine):
    with pytest.raises(fasa.Error) as e:
        engine.context(attn="fasa", budget=2.5)
    run = cli("run", "--attn", "fasa", "--budget", "2.5", "-p", "x", "-n", "1")  # (skips without the CLI)
    assert run.stderr.strip().endswith(f"error: {e.value}")
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([CLI, "serve", "--port", str(port), "-t", "1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        body = json.dumps({"prompt": "x", "attn": "fasa", "budget": 2.5}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body), timeout=10)
        assert refused.value.code == 400
        assert json.loads(refused.value.read())["error"]["message"] == str(e.value)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_tokens_logits_and_stats(engine):
    ids = engine.tokenize(PROMPT)
    assert engine.detokenize(ids).endswith(PROMPT)
    ctx = engine.context(n_ctx=256)
    with pytest.raises(fasa.Error):
        ctx.logits()  # nothing fed
    assert ctx.feed(PROMPT) == len(ids)
    logits = ctx.logits()
    assert logits.dtype == np.float32 and logits.shape == (engine.info["n_vocab"],)
    ctx.generate(max_tokens=3)
    s = ctx.stats()
    assert s["prompt_tokens"] == len(ids) and s["generated_tokens"] == 3 and s["n_ctx"] == 256
    other = engine.context(n_ctx=256)  # each context counts its own KV reads
    other.feed(PROMPT)
    assert s["kv_bytes_read"] == ctx.stats()["kv_bytes_read"] > 0
    assert ctx.n_past == len(ctx.tokens) == len(ids) + 3
    assert {"full", "fasa", "stream", "quest"} <= {p["name"] for p in fasa.policies()}
    assert {p["name"]: p["takes"] for p in fasa.policies()}["stream"] == ["sink"]
    assert "budget" in fasa.settings()


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
sys.path.insert(0, EXAMPLES)  # streaming_policy (registers "py-stream" on import)


def example(name):
    """Runs examples/python/NAME.py in a fresh interpreter; returns its output."""
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, name + ".py")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_python_streaming_llm_decodes_as_the_built_in_one(engine):
    import streaming_policy

    prompt = " ".join([PROMPT] * 20)
    for dense_layers in [[0], []]:
        got = engine.context(attn="py-stream", budget=24, dense_layers=dense_layers)
        want = engine.context(attn="stream", budget=24, dense_layers=dense_layers)
        assert got.generate(prompt, max_tokens=64, ignore_eos=True) == want.generate(prompt, max_tokens=64, ignore_eos=True)
        assert got.tokens == want.tokens
        np.testing.assert_array_equal(got.logits(), want.logits())
    assert streaming_policy.streaming_llm(0, 0, None, [0] * 10, 4, sink=2) == [0, 1, 8, 9]
    assert example("streaming_policy").endswith("the same as the built-in stream policy: True\n")


def test_a_python_policy_keeps_the_contract(engine):
    calls = []

    def everything_but_the_last(layer, kv_head, queries, keys, budget):
        calls.append((layer, queries.shape, keys.shape, budget))
        return list(range(len(keys)))  # one row too many: refused

    fasa.register_policy("py-greedy", everything_but_the_last)
    prompt = " ".join([PROMPT] * 6)
    wide = engine.context(attn="py-greedy", budget=100000, dense_layers=[])  # covers the context: dense, fn not asked
    assert wide.generate(prompt, max_tokens=8) == engine.context().generate(prompt, max_tokens=8)
    assert calls == []
    with pytest.raises(fasa.Error, match="policy 'py-greedy' returned .* rows for a budget of 16"):
        engine.context(attn="py-greedy", budget=16, dense_layers=[]).generate(prompt, max_tokens=2)
    layer, q_shape, k_shape, budget = calls[0]
    assert q_shape[0] >= 1 and q_shape[1] == k_shape[1] and budget == 16

    fasa.register_policy("py-outside", lambda layer, kv_head, q, keys, budget: [len(keys)])
    with pytest.raises(fasa.Error, match="policy 'py-outside' returned row .*, outside the context of"):
        engine.context(attn="py-outside", budget=16).generate(prompt, max_tokens=2)
    fasa.register_policy("py-2d", lambda layer, kv_head, q, keys, budget: np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(fasa.Error, match="policy 'py-2d': TypeError"):  # rows of row numbers: refused, not a crash
        engine.context(attn="py-2d", budget=16).generate(prompt, max_tokens=2)
    fasa.register_policy("py-raises", lambda *args: 1 / 0)
    with pytest.raises(fasa.Error, match="policy 'py-raises': ZeroDivisionError"):
        engine.context(attn="py-raises", budget=16).generate(prompt, max_tokens=2)
    with pytest.raises(fasa.Error, match="built-in"):
        fasa.register_policy("stream", lambda *args: [])


def test_without_numpy_generation_python_policies_and_logits_work(engine):
    script = os.path.join(os.path.dirname(__file__), "without_numpy.py")  # CI runs it in a venv without NumPy too
    run = subprocess.run([sys.executable, script, "--hide-numpy", PROMPT], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["text"] == engine.context().generate(PROMPT, max_tokens=8)
    kind, q_shape, k_shape, last_key, last_key_listed = got["seen"]
    assert kind == "memoryview" and q_shape[1] == k_shape[1] and last_key == last_key_listed
    fasa.register_policy("py-recent-np", lambda layer, kv_head, q, keys, budget: np.arange(len(keys) - budget, len(keys)))
    assert got["sparse"] == engine.context(attn="py-recent-np", budget=8, dense_layers=[]).generate(PROMPT * 4, max_tokens=4)
    ctx = engine.context()
    ctx.feed(PROMPT)
    assert got["logits_type"] == "memoryview" and got["logits"] == ctx.logits().tolist()


def test_the_generate_example_runs():
    out = example("generate")
    assert out.startswith("full: ") and "\nfasa: " in out and "prompt_tokens" in out


def test_the_compare_policies_example_tabulates_kl(engine, tmp_path):
    pytest.importorskip("pandas")  # Debian's python3-pandas (scripts/debian-packages.txt)
    text = tmp_path / "text.txt"  # the model's own continuation: 1100 tokens of its kind of text
    text.write_text(engine.context().generate("Ge1:1 In the beginning", max_tokens=1100, ignore_eos=True))
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, "compare_policies.py"), str(text)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    rows = {line.split()[0]: [float(x) for x in line.split()[-2:]] for line in run.stdout.splitlines()[2:]}
    assert set(rows) == {"fasa", "full", "quest", "stream"}, run.stdout
    assert rows["full"] == [0, 0]  # full attention against itself
    for policy in ("fasa", "quest", "stream"):  # each strays from full, less with 4x the budget
        assert rows[policy][0] > rows[policy][1] > 0, run.stdout


def test_a_python_policys_stream_dropped_early_does_not_hang(engine):
    import streaming_policy  # noqa: F401

    ctx = engine.context(attn="py-stream", budget=16, dense_layers=[], threads=2)
    stream = ctx.stream(" ".join([PROMPT] * 6), max_tokens=40)
    next(stream)
    del stream  # cancelled at its next token, its decode threads able to call the policy
    assert ctx.generate(" and", max_tokens=4)
    fasa.register_policy("py-empty", lambda *args: [])
    with pytest.raises(fasa.Error, match="must return a non-empty list of row numbers"):
        engine.context(attn="py-empty", budget=16).generate(" ".join([PROMPT] * 6), max_tokens=2)


def test_a_python_policy_runs_in_evaluations_and_bench_by_name(engine):
    import streaming_policy  # noqa: F401 (registers py-stream: StreamingLLM, decoding as the built-in stream)

    text = " ".join([PROMPT + " God created the heaven and the earth."] * 40)
    got = fasa.eval.ppl(engine, text, window=128, windows=1, attn=["stream", "py-stream:dense_layers=0"], budgets=[16],
                        threads=2)
    value = {(r["policy"], r["metric"]): r["value"] for r in got}
    assert value[("stream", "kld")] > 1e-4  # sparse: a difference to carry
    for metric in ("nll", "kld", "top1"):
        assert value[("py-stream", metric)] == value[("stream", metric)]
    got = fasa.eval.ca(engine, text, window=128, windows=1, attn=["stream", "py-stream"], top_k=[16], threads=2)
    assert [r["value"] for r in got if r["policy"] == "py-stream"] == [r["value"] for r in got if r["policy"] == "stream"]
    rows = fasa.bench(engine, n_prompt=[0], n_gen=[4], depth=[64], attn=["py-stream"], budget=16, repetitions=1, threads=2)
    assert [r["attn"] for r in rows] == ["py-stream"] and rows[0]["avg_ts"] > 0


def test_keywords_read_as_the_clis_flags(engine):
    # kv_type first, then the per-plane types, whatever the keywords' order (CLI11 reads them so)
    a = engine.context(cache_type_k="q8_0", kv_type="f32", n_ctx=256)
    b = engine.context(kv_type="f32", cache_type_k="q8_0", n_ctx=256)
    c = engine.context(cache_type_k="q8_0", cache_type_v="f32", n_ctx=256)
    for ctx in (a, b, c):
        ctx.feed(PROMPT)
    assert a.stats()["kv_fast_bytes"] == b.stats()["kv_fast_bytes"] == c.stats()["kv_fast_bytes"]
    assert a.stats()["kv_fast_bytes"] != engine.context(kv_type="f32", n_ctx=256).stats()["kv_fast_bytes"]
    # the estimate holds the weights as held, the cache and some scratch, and grows with the cache
    held = engine.info["held_weight_bytes"]
    assert held > 0
    f32 = engine.context(kv_type="f32", n_ctx=256).stats()
    assert f32["memory_estimate_bytes"] > held + f32["kv_fast_bytes"]
    assert a.stats()["memory_estimate_bytes"] < f32["memory_estimate_bytes"]
    # NumPy's numbers as Python's
    want = engine.context(attn="stream", budget=16).generate(" ".join([PROMPT] * 6), max_tokens=8)
    assert engine.context(attn="stream", budget=np.int64(16)).generate(" ".join([PROMPT] * 6), max_tokens=8) == want
    engine.context(attn="stream", budget=np.float64(0.5))


def test_eval_records_equal_the_clis_json(engine, tmp_path):
    out = tmp_path / "r.json"
    run = cli("eval", "retrieval", "--generate", "passkey,word", "--distractors", "--length", "512", "--n", "2",
              "--attn", "full,stream", "--budget", "16,0.5", "-t", "2", "--json", str(out))
    assert run.returncode == 0, run.stderr
    want = json.loads(out.read_text())
    got = fasa.eval.retrieval(engine, generate=["passkey", "word"], distractors=True, lengths=[512], n=2,
                              attn=["full", "stream"], budgets=[16, 0.5], threads=2)
    assert got == want
    assert {r["task_type"] for r in got} == {"passkey@512", "word@512", "all@512", "all"}
    assert {r["policy"] for r in got} == {"full", "stream"}
    assert all(0 <= r["value"] <= 100 for r in got if r["unit"] == "%")
    read = {(r["policy"], r["budget"]): r["value"] for r in got if r["metric"] == "kv_kib"}
    # a list setting gives a variant each, as the CLI's --fcs 2,4; answers=True gives each task's answer too
    records, answers = fasa.eval.retrieval(engine, generate=["passkey"], lengths=[512], n=2, attn=["full", "fasa"],
                                           budgets=[16], synthetic_profile=True, fcs=[2, 4], threads=2, answers=True)
    assert {(r["policy"], r["variant"]) for r in records} == {
        ("full", ""), ("fasa", "fcs=2 sharing=group dense=0"), ("fasa", "fcs=4 sharing=group dense=0")}
    assert len(answers) == 2 * 3
    assert all(set(a) == {"id", "type", "policy", "variant", "budget", "expected", "answer", "score"} for a in answers)
    for r in records:  # the answers are what the scores are made of
        if r["metric"] == "accuracy" and r["task_type"] == "all":
            scores = [a["score"] for a in answers if (a["policy"], a["variant"]) == (r["policy"], r["variant"])]
            assert len(scores) == 2 and r["value"] == pytest.approx(100 * sum(scores) / 2)
    assert read[("stream", 16)] < read[("full", 16)]
    assert {(r["budget"], r["budget_unit"]) for r in got} == {(16, "tokens"), (0.5, "share")}
    with pytest.raises(fasa.Error, match="give tasks=FILE or generate"):
        fasa.eval.retrieval(engine)
    # qa over a dictionary file, as the CLI's --qa-entries
    entries = tmp_path / "dict.txt"
    entries.write_text("".join(f"Word{i} \\Word{i}\\, n.\n   The meaning number {i} of a word.\n\n" for i in range(30)))
    run = cli("eval", "retrieval", "--generate", "qa", "--qa-entries", str(entries), "--length", "400", "--n", "2",
              "-t", "2", "--json", str(out))
    assert run.returncode == 0, run.stderr
    got = fasa.eval.retrieval(engine, generate=["qa"], qa_entries=str(entries), lengths=[400], n=2, threads=2)
    assert got == json.loads(out.read_text()) and {r["task_type"] for r in got} >= {"qa@400"}
    with pytest.raises(fasa.Error, match="needs --qa-entries"):
        fasa.eval.retrieval(engine, generate=["qa"], lengths=[400], n=1)
    # one-token answers left out (min_answer_tokens=2, the CLI's --min-answer-tokens 2): one task of three
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"type": "t", "prompt": "Ge1:1 In the beginning God created", "answer": a}) + "\n"
                             for a in ["the", "the heaven and the earth", "the"]))
    run = cli("eval", "retrieval", "--tasks", str(tasks), "--min-answer-tokens", "2", "-t", "2", "--json", str(out))
    assert run.returncode == 0, run.stderr
    got = fasa.eval.retrieval(engine, tasks=str(tasks), min_answer_tokens=2, threads=2)
    assert got == json.loads(out.read_text())
    assert {r["n"] for r in got if r["metric"] == "accuracy"} == {1}


def test_what_a_new_user_tries(engine):
    with pytest.raises(TypeError, match="must be callable"):
        fasa.register_policy("py-five", 5)

    def last_rows(layer, kv_head, queries, keys, budget):
        """The most recent rows."""
        return list(range(len(keys) - budget, len(keys)))

    fasa.register_policy("py-last", last_rows)
    assert {"name": "py-last", "description": "The most recent rows.", "dense": False, "takes": []} in fasa.policies()
    for bad, message in [({"n_ctx": -5}, "n_ctx: must be from 0 to"), ({"threads": 2000}, "threads: must be from 0 to"),
                         ({"n_ctx": "x"}, "n_ctx: must be a whole number"),
                         ({"bugdet": 8}, r"no setting 'bugdet' \(the settings: attn, budget, ")]:
        with pytest.raises(fasa.Error, match=message):
            engine.context(**bad)


def test_bench_rows_as_the_clis_json(engine, tmp_path):
    got = fasa.bench(engine, n_prompt=[16], n_gen=[4], attn=["full", "fasa"], repetitions=1, threads=2)
    run = cli("bench", "-p", "16", "-n", "4", "-r", "1", "--attn", "full,fasa", "-t", "2", "-o", "json")
    want = json.loads(run.stdout)
    timed = {"avg_ts", "stddev_ts", "median_ts", "samples_ts", "samples_ns", "avg_ns", "stddev_ns", "rss_bytes", "peak_rss_mib",
             "achieved_gbps", "test_time", "kv_bytes_read_per_token", "kv_prefetch_hit_rate"}
    assert [{k: v for k, v in r.items() if k not in timed} for r in got] == \
        [{k: v for k, v in r.items() if k not in timed} for r in want]
    assert [r["n_prompt"] for r in got] == [16, 0, 16, 0] and all(r["avg_ts"] > 0 for r in got)
    with pytest.raises(fasa.Error, match="budget"):
        fasa.bench(engine, attn=["fasa"], budget="lots")


def test_ppl_and_ca_records_equal_the_clis_json(engine, tmp_path):
    text = " ".join([PROMPT + " God created the heaven and the earth."] * 40)
    (tmp_path / "t.txt").write_text(text)
    common = ["-f", str(tmp_path / "t.txt"), "-c", "128", "--windows", "2", "-t", "2"]
    run = cli("eval", "ppl", *common, "--attn", "full,stream", "--budget", "16,0.5", "--json", str(tmp_path / "p.json"))
    assert run.returncode == 0, run.stderr
    got = fasa.eval.ppl(engine, text, window=128, windows=2, attn=["full", "stream"], budgets=[16, 0.5], threads=2)
    assert got == json.loads((tmp_path / "p.json").read_text())
    assert {r["metric"] for r in got} == {"nll", "ppl", "kld", "top1", "kv_kib"}
    # the CLI's name for the budgets works too; a mistaken keyword's error lists the function's own beside the settings
    assert fasa.eval.ppl(engine, text, window=128, windows=2, attn=["full", "stream"], budget=[16, 0.5], threads=2) == got
    with pytest.raises(fasa.Error, match=r"no setting 'windowz' .*own keywords: engine, text, window, windows, score_from"):
        fasa.eval.ppl(engine, text, windowz=2)
    run = cli("eval", "ca", *common, "--attn", "stream,oracle", "--topk", "8,16", "--json", str(tmp_path / "c.json"))
    assert run.returncode == 0, run.stderr
    got = fasa.eval.ca(engine, text, window=128, windows=2, attn=["stream", "oracle"], top_k=[8, 16], threads=2)
    assert got == json.loads((tmp_path / "c.json").read_text())
    assert [r["value"] for r in got if r["policy"] == "oracle"] == [100.0, 100.0]  # the exact top-K, by definition
    run = cli("eval", "continuation", "-f", str(tmp_path / "t.txt"), "-c", "64", "--prompts", "2", "-n", "8",
              "--attn", "full,stream", "--budget", "16", "-t", "2", "--json", str(tmp_path / "g.json"))
    assert run.returncode == 0, run.stderr
    got = fasa.eval.continuation(engine, text, prompt_tokens=64, prompts=2, tokens=8, attn=["full", "stream"],
                                 budgets=[16], threads=2)
    assert got == json.loads((tmp_path / "g.json").read_text())
    assert {r["metric"] for r in got} == {"shared", "shared_mean", "first_equal", "kv_kib"}
    assert [r["value"] for r in got if r["policy"] == "full" and r["metric"] == "shared"] == [8]
