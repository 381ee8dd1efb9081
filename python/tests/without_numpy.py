"""fasa where NumPy is not installed: generation, a Python policy and logits() work, the float32
values coming as memoryviews. Prints what it got as JSON (test_fasa.py compares it with the NumPy path).

    python without_numpy.py [--hide-numpy] [PROMPT]    # --hide-numpy: as if NumPy were not installed
"""
import json
import sys

args = sys.argv[1:]
if args[:1] == ["--hide-numpy"]:
    sys.modules["numpy"] = None  # `import numpy` now fails
    args = args[1:]
try:
    import numpy  # noqa: F401
    sys.exit("without_numpy.py: NumPy is installed here (give --hide-numpy)")
except ImportError:
    pass

import fasa  # noqa: E402

PROMPT = args[0] if args else "Ge1:1 In the beginning"
engine = fasa.Engine()
seen = []


def recent(layer, kv_head, queries, keys, budget):
    """The most recent rows."""
    seen.append([type(keys).__name__, list(queries.shape), list(keys.shape), keys[len(keys) - 1, 0],
                 keys.tolist()[-1][0]])
    return range(len(keys) - budget, len(keys))


fasa.register_policy("py-recent", recent)
ctx = engine.context()
ctx.feed(PROMPT)
logits = ctx.logits()
got = {"text": engine.context().generate(PROMPT, max_tokens=8),
       "sparse": engine.context(attn="py-recent", budget=8, dense_layers=[]).generate(PROMPT * 4, max_tokens=4),
       "seen": seen[0], "logits_type": type(logits).__name__, "logits": logits.tolist()}
assert got["logits_type"] == "memoryview" and len(got["logits"]) == engine.info["n_vocab"], got["logits_type"]
print(json.dumps(got))
