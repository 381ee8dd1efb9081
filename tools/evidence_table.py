#!/usr/bin/env python3
"""Markdown tables of `fasa eval retrieval --json` records with 95 % intervals (issue 41's tables).

  tools/evidence_table.py RECORDS.json [--types all@4096,passkey@4096,...] [--budgets 0.03125,256]

One table per task type: a row per policy (and variant), a column per budget, each cell the accuracy
and its 95 % Wilson interval over the records' n tasks (an interval for a proportion; tasks that score
a share of several values make it approximate)."""
import argparse
import json
import math


def wilson(p, n, z=1.96):
    """95 % Wilson score interval of a proportion p (0..1) over n trials."""
    if n == 0:
        return 0.0, 1.0
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def parse_budget(text):
    """(value, unit) as the records give a budget: "256" tokens, "0.03125" or "50%" a share (as fasa reads them)."""
    if text.endswith("%"):
        return float(text[:-1]) / 100, "share"
    return float(text), "share" if "." in text else "tokens"


def budget_label(b):
    """A share as 1/N (or a percentage), a count of tokens as it is."""
    value, unit = b
    if unit == "tokens":
        return f"{value:g}"
    return f"1/{round(1 / value)}" if 1 / value == round(1 / value) else f"{100 * value:g}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records")
    ap.add_argument("--types", help="task types, comma-separated (default: every type, in file order)")
    ap.add_argument("--budgets", help="budgets, comma-separated (default: all)")
    ap.add_argument("--metric", default="accuracy")
    a = ap.parse_args()
    recs = [r for r in json.load(open(a.records)) if r["metric"] == a.metric]
    types = a.types.split(",") if a.types else list(dict.fromkeys(r["task_type"] for r in recs))
    budgets = ([parse_budget(b) for b in a.budgets.split(",")] if a.budgets
               else list(dict.fromkeys((float(r["budget"]), r["budget_unit"]) for r in recs)))
    rows = list(dict.fromkeys((r["policy"], r["variant"]) for r in recs))
    for t in types:
        cells = {(r["policy"], r["variant"], (float(r["budget"]), r["budget_unit"])): r for r in recs if r["task_type"] == t}
        n = next((r["n"] for r in cells.values()), 0)
        print(f"\n{a.metric} (%) on {t}, {n} tasks, 95 % interval in brackets\n")
        print("| policy | " + " | ".join(budget_label(b) for b in budgets) + " |")
        print("|---|" + "---|" * len(budgets))
        for policy, variant in rows:
            out = []
            for b in budgets:
                r = cells.get((policy, variant, b))
                if r is None:
                    out.append("")
                    continue
                lo, hi = wilson(r["value"] / 100, r["n"])
                out.append(f"{r['value']:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]")
            name = policy + (f" ({variant})" if variant else "")
            print(f"| {name} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
