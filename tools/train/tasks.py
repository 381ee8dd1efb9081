"""Synthetic long-context documents for training, with the tokens the loss is taken on.

Two families, both "find it earlier in the context and copy it":
- the formats of ../shared/eval/retrieval.jsonl (secret, wordof, names, passkey, records), with training
  text as the haystack;
- the RULER-style kinds that `fasa eval retrieval --generate` builds (passkey, multikey, multivalue,
  multineedle, vartrack; src/eval/task_gen.cpp writes the same text), with text or RULER's noise
  sentences as the haystack.
A document is a list of (text, is_target) pieces. The loss is taken only on target tokens (answers and
the second copy of a repeated segment): the first mention of a random value is unpredictable noise that
drowns the copy signal, the lesson of the first attempt (issue 20).
"""
import random
import re

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
RULER_KINDS = ("passkey", "multikey", "multivalue", "multineedle", "vartrack")
EVAL_KINDS = ("secret", "wordof", "names", "passkey_eval", "records")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class Haystack:
    """Random pieces of training text: consecutive verses, dictionary entries, or noise sentences."""

    def __init__(self, kjv, gcide):
        self.kjv, self.gcide = kjv, gcide

    def pieces(self, rng, n_chars, style=None):
        style = style or rng.choice(("kjv", "gcide", "mixed", "noise"))
        out, total = [], 0
        while total < n_chars:
            src = style if style != "mixed" else rng.choice(("kjv", "gcide"))
            if src == "noise":
                p = NOISE
            elif src == "kjv":
                i = rng.randrange(len(self.kjv) - 8)
                p = "\n".join(self.kjv[i:i + rng.randint(1, 4)]) + "\n"
            else:
                i = rng.randrange(len(self.gcide) - 3)
                p = "".join(self.gcide[i:i + rng.randint(1, 2)])
            if style == "mixed" and rng.random() < 0.5:  # cut mid-line, as the public tasks' haystacks are
                p = p[:rng.randint(10, max(11, len(p)))] + "\n"
            out.append(p)
            total += len(p)
        return out


def num(rng, digits):
    return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))


def var_name(rng):
    return "".join(rng.choice(LETTERS) for _ in range(4))


# Share of training documents whose needles lean to the start (the far end from the questions). Set by
# train.py for training rows only; evaluation keeps uniform depths as the engine's tasks have. With
# uniform depths few needles lie more than 3000 tokens back and a 4K fine-tune did not move in 600 steps.
FAR_SHARE = 0.0


def place(rng, hay, needles):
    """Insert needle lines at random places between haystack pieces, keeping the needles' order."""
    if FAR_SHARE > 0 and rng.random() < FAR_SHARE:
        slots = sorted(int(rng.random() ** 2 * (len(hay) + 1)) for _ in needles)
    else:
        slots = sorted(rng.randint(0, len(hay)) for _ in needles)
    out, j = [], 0
    for i in range(len(hay) + 1):
        while j < len(needles) and slots[j] == i:
            out.append(needles[j])
            j += 1
        if i < len(hay):
            out.append(hay[i])
    return out


def ruler_doc(rng, kind, hay, more=False):
    """(context pieces, [(question, answer)]) for one RULER-style kind; hay: list of haystack pieces.
    The same text as src/eval/task_gen.cpp (a question whose answer is judged by prefix). With `more`
    (training rows) the kinds with several needles ask about up to three of them: at 4096 tokens a
    step is one row, and one answer per document is a thin signal for the time a step takes."""
    if kind == "passkey":
        k = num(rng, 5)
        ctx = ["There is a pass key hidden in this text. Find it and remember it.\n"]
        ctx += place(rng, hay, [f"The pass key is {k}. Remember it. {k} is the pass key.\n"])
        return ctx, [("What is the pass key? The pass key is", " " + k)]
    if kind == "multikey":
        keys = rng.sample(range(1000, 10000), 6)
        vals = [num(rng, 5) for _ in keys]
        ctx = ["Here is a list of records. Each record has a number.\n"]
        ctx += place(rng, hay, [f"Record {k}: {v}.\n" for k, v in zip(keys, vals)])
        asked = rng.sample(range(len(keys)), 3 if more else 1)
        return ctx, [(f"What is the number of Record {keys[i]}? Record {keys[i]}:", " " + vals[i]) for i in asked]
    if kind == "multivalue":
        names = NAMES_SAMPLE(rng, 3)
        lines = [(n, num(rng, 4)) for n in [names[0]] * 3 + names[1:]]
        rng.shuffle(lines)
        ctx = ["Each name below has one or more numbers.\n"]
        ctx += place(rng, hay, [f"One number of {n} is {v}.\n" for n, v in lines])
        asked = rng.sample(names, 3) if more else names[:1]
        return ctx, [(f"What are all the numbers of {n}? The numbers of {n} are",
                      " " + ", ".join(v for m, v in lines if m == n)) for n in asked]
    if kind == "multineedle":
        names = NAMES_SAMPLE(rng, 4)
        vals = [num(rng, 4) for _ in names]
        ctx = ["Here are some favourite numbers.\n"]
        ctx += place(rng, hay, [f"The favourite number of {n} is {v}.\n" for n, v in zip(names, vals)])
        asked = rng.sample(range(len(names)), 3 if more else 1)
        return ctx, [(f"What is the favourite number of {names[i]}? The favourite number of {names[i]} is",
                      " " + vals[i]) for i in asked]
    if kind == "vartrack":
        a, b, c, d, e = (var_name(rng) for _ in range(5))
        v, w = num(rng, 5), num(rng, 5)
        chain = [f"VAR {a} = {v}.\n", f"VAR {b} = VAR {a}.\n", f"VAR {c} = VAR {b}.\n"]
        other = [f"VAR {d} = {w}.\n", f"VAR {e} = VAR {d}.\n"]
        needles = []  # a random merge of the two chains, each defined before it is used
        while chain or other:
            src = chain if chain and (not other or rng.random() < 0.6) else other
            needles.append(src.pop(0))
        ctx = ["Follow the chain of variables.\n"] + place(rng, hay, needles)
        qa = [(f"What is the value of VAR {c}? VAR {c} =", f" VAR {b} = VAR {a} = {v}")]
        if more:
            qa = [(f"What is the value of VAR {e}? VAR {e} =", f" VAR {d} = {w}")] + qa
        return ctx, qa
    raise ValueError(kind)


def eval_style_doc(rng, kind, hay, names, words):
    """The formats of ../shared/eval/retrieval.jsonl, built from training text."""
    if kind == "secret":
        p = f"{rng.choice(words)} {rng.choice(words)}"
        ctx = ["Somewhere in this text is a secret phrase. Remember it.\n"]
        ctx += place(rng, hay, [f"The secret phrase is {p}. Remember: {p}.\n"])
        return ctx, [("What is the secret phrase? The secret phrase is", " " + p)]
    if kind == "wordof":
        who = rng.sample(names, rng.randint(3, 8))
        what = [rng.choice(words) for _ in who]
        ctx = place(rng, hay, [f"The word of {n} is {w}.\n" for n, w in zip(who, what)])
        i = rng.randrange(len(who))
        return ctx, [(f"The word of {who[i]} is", " " + what[i])]
    if kind == "names":
        who = rng.sample(names, rng.randint(2, 6))
        vals = [num(rng, 4) for _ in who]
        needles = [f"The favourite number of {n} is {v}.\n" for n, v in zip(who, vals)]
        i = rng.randrange(len(who))
        if rng.random() < 0.3:
            needles.append(needles[i])
        ctx = place(rng, hay, needles)
        return ctx, [(f"The favourite number of {who[i]} is", " " + vals[i])]
    if kind == "passkey_eval":
        return ruler_doc(rng, "passkey", hay)
    if kind == "records":
        keys = rng.sample(range(1000, 10000), rng.randint(4, 30))
        vals = [num(rng, 5) for _ in keys]
        ctx = ["Here is a list of records. Each record has a number.\n"]
        ctx += place(rng, hay, [f"Record {k}: {v}.\n" for k, v in zip(keys, vals)])
        qs = [(f"What is the number of Record {keys[i]}? Record {keys[i]}:", " " + vals[i])
              for i in rng.sample(range(len(keys)), min(3, len(keys)))]
        return ctx, [(q, a + ".\n\n") for q, a in qs[:-1]] + [qs[-1]]
    raise ValueError(kind)


def drill_doc(rng, hay, names, words, n_tokens):
    """Many keyed lines of every format, then several questions: the value follows a key of several
    tokens (4 digits, a name, 4 letters) whose last token (":", " is", " =") is shared by every line, so
    only a head that matches the whole key finds it. The eval formats give one such question per ~1000
    tokens; this gives one per ~20, the density the key matching needs to form."""
    formats = {
        "records": (lambda: f"{rng.randint(1000, 9999)}", lambda: num(rng, 5),
                    "Record {k}: {v}.\n", "What is the number of Record {k}? Record {k}:"),
        "names": (lambda: rng.choice(names), lambda: num(rng, 4),
                  "The favourite number of {k} is {v}.\n", "The favourite number of {k} is"),
        "wordof": (lambda: rng.choice(names), lambda: rng.choice(words),
                   "The word of {k} is {v}.\n", "The word of {k} is"),
        "vartrack": (lambda: var_name(rng), lambda: num(rng, 5),
                     "VAR {k} = {v}.\n", "What is the value of VAR {k}? VAR {k} ="),
    }
    if rng.random() < 0.25:
        return multivalue_drill(rng, hay, names, n_tokens)
    fmt = formats[rng.choice(list(formats))] if rng.random() < 0.7 else None  # one format, or mixed
    lines = {}
    for _ in range(rng.randint(4, max(4, min(24, n_tokens // 20)))):  # a keyed line is ~12 tokens
        f = fmt or formats[rng.choice(list(formats))]
        k = f[0]()
        if (k, f[2]) not in lines:
            lines[(k, f[2])] = (f, f[1]())
    needles = [f[2].format(k=k, v=v) for (k, _), (f, v) in lines.items()]
    ctx = place(rng, hay, needles)
    asked = rng.sample(list(lines.items()), min(len(lines), rng.randint(2, 6)))
    qa = [(f[3].format(k=k), f" {v}") for (k, _), (f, v) in asked]
    return ctx, [(q, a + ".\n") for q, a in qa[:-1]] + [qa[-1]]


def multivalue_drill(rng, hay, names, n_tokens):
    """Names with one to three numbers each, lines shuffled, then "all the numbers of X" questions: the
    answer lists X's numbers in the order they appear, so after each value the lookup must move on to
    X's next line, not the first again. multivalue stayed at 0 % at every length without these rows."""
    who = rng.sample(names, rng.randint(2, max(2, min(8, n_tokens // 40))))
    lines = [(n, num(rng, 4)) for n in who for _ in range(rng.choice((1, 2, 3, 3)))]
    rng.shuffle(lines)
    ctx = ["Each name below has one or more numbers.\n"]
    ctx += place(rng, hay, [f"One number of {n} is {v}.\n" for n, v in lines])
    qa = [(f"What are all the numbers of {n}? The numbers of {n} are", " " + ", ".join(v for m, v in lines if m == n))
          for n in rng.sample(who, min(len(who), rng.randint(2, 4)))]
    return ctx, [(q, a + ".\n") for q, a in qa[:-1]] + [qa[-1]]


def vartrack_drill(rng, hay, n_tokens):
    """Two to five interleaved chains of one to three hops ("VAR B = VAR A.", "VAR A = 12345."), then
    questions about the last variable of several: whether "VAR X =" goes on to a variable or ends in a
    number is only known by finding X's own line. After run8 the model answered the eval's second hop
    with a number every time (in its one-question documents the second hop always ended the chain)."""
    chains = []
    for _ in range(rng.randint(2, max(2, min(5, n_tokens // 60)))):
        names = [var_name(rng) for _ in range(rng.randint(1, 3))]
        chains.append([f"VAR {names[0]} = {num(rng, 5)}.\n"] +
                      [f"VAR {b} = VAR {a}.\n" for a, b in zip(names, names[1:])])
    pending, needles = [list(c) for c in chains], []
    while any(pending):  # a random merge, each chain in its own order
        needles.append(rng.choice([c for c in pending if c]).pop(0))
    ctx = ["Follow the chain of variables.\n"] + place(rng, hay, needles)
    qa = []
    for c in rng.sample(chains, min(len(chains), rng.randint(2, 4))):
        last = c[-1].split(" = ")[0]  # "VAR X"
        answer = " = ".join(line.split(" = ")[0] for line in reversed(c[:-1]))
        value = c[0].split(" = ")[1].rstrip(".\n")
        qa.append((f"What is the value of {last}? {last} =", " " + (answer + " = " if answer else "") + value))
    return ctx, [(q, a + ".\n") for q, a in qa[:-1]] + [qa[-1]]


NAMES = []


def NAMES_SAMPLE(rng, n):
    return rng.sample(NAMES, n)


def build(rng, sp, kind, hay_src, names, words, n_tokens, more=False):
    """(ids, target mask) of a document of at most n_tokens tokens, the questions at the end; None if
    its needles and questions alone need more. `more`: several questions where the kind allows.
    Documents other than drills fill at least 97 % of n_tokens, as the engine's generated tasks do: with
    a first guess of haystack and only shrinking, 4K documents were 2800-3300 tokens long, so needles
    3300-4096 tokens back were never trained (and the engine's 4K tasks failed on them)."""
    drill = kind.endswith("drill")
    fill = 0.0 if drill else 0.97
    budget = int(n_tokens * (1.0 if drill else 3.0))  # characters of haystack
    best = None
    for _ in range(12):
        hay = hay_src.pieces(rng, budget)
        if kind == "drill":
            ctx, qa = drill_doc(rng, hay, names, words, n_tokens)
        elif kind == "vartrack_drill":
            ctx, qa = vartrack_drill(rng, hay, n_tokens)
        elif kind == "multivalue_drill":
            ctx, qa = multivalue_drill(rng, hay, names, n_tokens)
        elif kind in RULER_KINDS:
            ctx, qa = ruler_doc(rng, kind, hay, more)
        else:
            ctx, qa = eval_style_doc(rng, kind, hay, names, words)
        pieces = [(p, False) for p in ctx]
        qa = [(q, a + ".\n\n") for q, a in qa[:-1]] + qa[-1:] if kind in RULER_KINDS else qa
        for q, a in qa:
            if pieces and not pieces[-1][0].endswith("\n"):
                pieces.append(("\n", False))
            pieces += [(q, False), (a, True)]
        ids, mask = tokenize(sp, pieces)
        if len(ids) <= n_tokens:
            best = ids, mask
            if len(ids) >= fill * n_tokens:
                return best
        elif not hay:  # needles and questions alone do not fit
            return None
        budget = max(0, int(budget * 0.985 * n_tokens / len(ids)) - 20)
    return best  # the last that fitted, if any (a short one rather than none)


def tokenize(sp, pieces):
    """Token ids of the whole text (tokenized at once, as the engine does) and a target mask per token."""
    text = "".join(p for p, _ in pieces)
    spans, pos = [], 0
    for p, t in pieces:
        b = len(p.encode("utf-8"))
        if t:
            spans.append((pos, pos + b))
        pos += b
    ids = sp.encode(text)
    mask, off = [], -1  # the dummy prefix '▁' of the first piece is not in the text
    for i in ids:
        piece = sp.id_to_piece(i)
        n = 1 if re.fullmatch(r"<0x[0-9A-F]{2}>", piece) else len(piece.replace("\u2581", " ").encode("utf-8"))
        start = max(off, 0)
        mask.append(any(s <= start < e for s, e in spans) or any(start < s < off + n for s, _ in spans))
        off += n
    if off != pos:  # the pieces must spell the text (no whitespace normalisation), or the mask is off
        raise ValueError("tokenizer pieces do not cover the text byte for byte")
    return ids, mask
