"""Training text from Debian packages, with the evaluation books and entries held out.

KJV (`bible-kjv-text`, read with the `bible` command, lines like "Ge1:1 In the beginning ...") without
Isaiah, Proverbs and Acts; GCIDE (`dict-gcide`) entries whose headword does not start with W-Z.
The held-out part is what ../shared/eval/ is built from, so none of it may reach training.

A machine without those packages (a lent GPU machine) trains from a copy of the training part:
  python3 tools/train/corpus.py DIR     # DIR/kjv.txt.gz (held-out books already removed), DIR/gcide.*
then train.py --corpus DIR.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys

HELD_OUT_BOOKS = ("Isa", "Prv", "Acts")
HELD_OUT_LETTERS = tuple("WXYZwxyz")
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def kjv_lines(copy_dir=None):
    if copy_dir:  # a copy written by this file's main: the held-out books are not in it
        with gzip.open(os.path.join(copy_dir, "kjv.txt.gz"), "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")
        return [l for l in lines if l and not l.startswith(HELD_OUT_BOOKS)]
    out = subprocess.run(["bible", "-f", "-l100000", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True, env=dict(os.environ, COLUMNS="100000")).stdout
    lines = [l for l in out.split("\n") if re.match(r"^[1-3]?[A-Za-z]+\d+:\d+ ", l)]
    if len(lines) < 30000:
        raise SystemExit(f"bible printed {len(lines)} verses; is bible-kjv-text installed?")
    return [l for l in lines if not l.startswith(HELD_OUT_BOOKS)]


def _b64(s):
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def gcide_entries(root=None):
    root = root or "/usr/share/dictd"
    data = gzip.open(os.path.join(root, "gcide.dict.dz")).read()
    seen, entries = set(), []
    for line in open(os.path.join(root, "gcide.index"), encoding="utf-8", errors="replace"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0].startswith("00") or not parts[0][:1].isalpha():
            continue
        off, ln = _b64(parts[1]), _b64(parts[2])
        if off in seen:
            continue
        seen.add(off)
        text = data[off:off + ln].decode("utf-8", errors="replace")
        head = text.lstrip()[:1]
        if parts[0].startswith(HELD_OUT_LETTERS) or head in HELD_OUT_LETTERS:
            continue
        entries.append(text.rstrip("\n") + "\n")
    if len(entries) < 50000:
        raise SystemExit(f"read {len(entries)} GCIDE entries; is dict-gcide installed?")
    return entries


def names_and_words(kjv):
    """Proper names (capitalised words seen mid-verse) and common lower-case words from the training KJV."""
    from collections import Counter
    caps, low, first = Counter(), Counter(), Counter()
    for l in kjv:
        toks = re.findall(r"[A-Za-z]+", l.split(" ", 1)[1])
        first[toks[0] if toks else ""] += 1
        for i, w in enumerate(toks):
            if i > 0 and w[0].isupper() and w[1:].islower() and len(w) >= 3:
                caps[w] += 1
            elif w.islower() and len(w) >= 4:
                low[w] += 1
    names = [w for w, c in caps.most_common(600) if low[w.lower()] == 0 and first[w] < 3][:300]
    words = [w for w, c in low.most_common(1500)][100:1100]
    return names, words


def write_copy(folder):
    """The training text for a machine without bible-kjv-text and dict-gcide (see the module's note)."""
    os.makedirs(folder, exist_ok=True)
    with gzip.open(os.path.join(folder, "kjv.txt.gz"), "wt", encoding="utf-8") as f:
        f.write("\n".join(kjv_lines()))
    for name in ("gcide.dict.dz", "gcide.index"):  # filtered when read, as from the package
        shutil.copyfile(os.path.join("/usr/share/dictd", name), os.path.join(folder, name))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: corpus.py DIR  (writes the training text there)")
    write_copy(sys.argv[1])
