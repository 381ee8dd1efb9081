#!/usr/bin/env python3
"""Items for lm-evaluation-harness's fasa tasks (this folder's YAML), from held-out data only:

- kjv_choice.jsonl: multiple choice. A window of held-out KJV verses (Isaiah, Proverbs) ends inside a
  verse; the choices are the verse's next words and the same number of words from three other verses.
- retrieval.jsonl: the held-out retrieval tasks (../shared/eval/retrieval.jsonl), the first N of each type.

Both are what `fasa eval choice --items` and `fasa eval retrieval --tasks` read, so the harness's
scores can be set beside fasa's own item by item. Deterministic for a given seed.

    python3 tools/lm-eval/make_items.py --out DIR [--shared ../shared] [--items 24] [--per-type 4]
"""
import argparse
import json
import os
import random


def verses(path):
    """The text of each verse ("Prv1:2 To know wisdom ..."), reference and all, in order."""
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def choice_items(lines, n, seed, context_verses=4, words=4):
    rng = random.Random(seed)
    long_enough = [i for i in range(context_verses, len(lines)) if len(lines[i].split()) >= 2 * words + 4]
    items = []
    for k, i in enumerate(rng.sample(long_enough, n)):
        verse = lines[i].split()
        cut = rng.randrange(3, len(verse) - words)  # the verse's first `cut` words stay in the context
        context = "\n".join(lines[i - context_verses:i] + [" ".join(verse[:cut])])
        others = rng.sample([j for j in long_enough if abs(j - i) > context_verses], 3)
        wrong = []
        for j in others:
            w = lines[j].split()
            start = rng.randrange(1, len(w) - words)
            wrong.append(w[start:start + words])
        choices = [" " + " ".join(c) for c in wrong]
        gold = k % 4
        choices.insert(gold, " " + " ".join(verse[cut:cut + words]))
        items.append({"id": f"kjv-{i}", "context": context, "choices": choices, "gold": gold})
    return items


def retrieval_items(path, per_type):
    count, out = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            task = json.loads(line)
            if count.setdefault(task["type"], 0) < per_type:
                count[task["type"]] += 1
                out.append({k: task[k] for k in ("id", "type", "prompt", "answer")})
    return out


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the JSONL files (run lm-eval from there)")
    ap.add_argument("--shared", default=os.path.join(here, "..", "..", "..", "shared"), help="the shared folder (eval/ in it)")
    ap.add_argument("--items", type=int, default=24, help="multiple-choice items")
    ap.add_argument("--per-type", type=int, default=4, help="retrieval tasks of each type")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    write_jsonl(os.path.join(a.out, "kjv_choice.jsonl"),
                choice_items(verses(os.path.join(a.shared, "eval", "heldout_kjv.txt")), a.items, a.seed))
    write_jsonl(os.path.join(a.out, "retrieval.jsonl"),
                retrieval_items(os.path.join(a.shared, "eval", "retrieval.jsonl"), a.per_type))


if __name__ == "__main__":
    main()
