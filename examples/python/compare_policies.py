"""Compare attention policies on your own text: each decodes it token by token, and a pandas table shows
how far its next-token distributions stray from full attention's (KL divergence, nats) per budget.

    python3 examples/python/compare_policies.py TEXT_FILE [MODEL]

FASA measures its automatic profile on the first window (at least 1024 tokens); a profile from
`fasa calibrate` can be given with profile="file.json" instead."""
import sys

import pandas as pd

import fasa

text = open(sys.argv[1], encoding="utf-8").read()
engine = fasa.Engine(sys.argv[2] if len(sys.argv) > 2 else None)
records = fasa.eval.ppl(engine, text, window=1100, windows=1, score_from=1024,
                        attn=["full", "fasa", "stream", "quest"], budgets=[32, 128])
kl = pd.DataFrame(r for r in records if r["metric"] == "kld")
print(kl.pivot_table(index=["policy", "variant"], columns="budget", values="value").round(6).to_string())
