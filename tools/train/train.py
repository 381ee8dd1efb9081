"""Staged, resumable training of a small Llama that retrieves from its context (issue 20's recipe).

  python3 tools/train/train.py --out ~/.cache/fasa-train/run1 [--resume]

Stages (each logged to OUT/log.tsv; a checkpoint OUT/ckpt.pt after every --ckpt-every steps):
  induct   T=128:  rows of random tokens whose segments repeat, loss on the repeats only: induction heads
                   form here or nowhere (anything else in the rows lengthens the plateau). The tokens
                   come from the first 64 ids, then 256, 1024, all, each time the copy accuracy of the
                   batch passes 70 %: on 64 ids the heads form in ~1000 steps, on all 4093 not in 2000;
                   each widening is relearned in ~150 steps;
  copy     T=256:  copied segments inside text, and lookups, loss on the copied tokens; a quarter of the
                   rows stay random repeats (without them the copy accuracy on random ids fell from
                   94 % to 8 % in 300 steps);
  digits   T=256:  a quarter of the rows are random digit strings, each written twice: with ten tokens a
                   copy must match the last two or three tokens, not one — the skill the digit keys and
                   values of records and multikey need (after keys: records 0 %, digits copied 60-70 %);
  text     T=512:  half the rows natural text: the lookup stages saw ~2 M text tokens, too few for a
                   language model (held-out KJV NLL 5.7 nats after `digits`, kjv-tiny 3.45);
  long1k   T=1024: lookups at longer range, 25 % natural text (full loss), 10 % repeats, 10 % copy rows;
  long2k   T=2048: the same mix; a step between 1K and 4K (straight from 1K to 4K, even copying within
                   a 4K row fell to 41 % and did not recover in 100 steps: RoPE does not extrapolate);
  long4k   T=4096: the target context, same mix;
  chains1k T=1024: half the task rows multivalue, vartrack and drills of them (after three long4k runs
                   both were at 0 %, each failing on the one token that picks the next line);
  chains4k T=4096: the same at the target context;
  long8k   T=8192: the 8K model (issue 41: grown from the 4K one by grow.py, RoPE base raised), long4k's mix;
  chains8k T=8192: chains4k's mix at 8K.
  long16k, chains16k T=16384: the same two at 16K (on a GPU: --device cuda --workers N --batch-scale K).
The learning rate falls linearly to a tenth over the last stage of a run (--until, default chains4k).
Each stage's last checkpoint is kept as OUT/ckpt-STAGE.pt.
A stage ends after its step count, or early once lookup accuracy passes its goal.
With --time-limit (a lent machine's lease) each stage is cut, after timing its steps 6-15, to at most an
equal share of the time left; the last stage anneals over its cut length.
"""
import argparse
import collections
import json
import math
import multiprocessing
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import tasks  # noqa: E402
from model import Config, Llama  # noqa: E402

# name, context T, batch, max steps, early-stop accuracy, mix (repeat, copy, text, tasks, drill, digits)
STAGES = [
    ("induct", 128, 16, 4000, 0.9, (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
    ("copy", 256, 16, 3000, 0.8, (0.25, 0.35, 0.0, 0.4, 0.0, 0.0)),
    ("keys", 256, 16, 3000, 0.9, (0.15, 0.1, 0.1, 0.25, 0.4, 0.0)),
    ("digits", 256, 16, 2000, 0.95, (0.1, 0.05, 0.1, 0.2, 0.3, 0.25)),
    ("text", 512, 8, 2500, 1.01, (0.05, 0.05, 0.5, 0.2, 0.1, 0.1)),
    ("long1k", 1024, 4, 600, 0.8, (0.1, 0.1, 0.25, 0.4, 0.1, 0.05)),
    ("long2k", 2048, 2, 300, 1.01, (0.1, 0.1, 0.25, 0.4, 0.1, 0.05)),
    ("long4k", 4096, 1, 500, 1.01, (0.05, 0.1, 0.25, 0.4, 0.15, 0.05)),
    ("chains1k", 1024, 4, 1500, 1.01, (0.05, 0.05, 0.2, 0.6, 0.05, 0.05)),
    ("chains4k", 4096, 1, 800, 1.01, (0.05, 0.05, 0.25, 0.5, 0.1, 0.05)),
    ("long8k", 8192, 1, 600, 1.01, (0.05, 0.1, 0.25, 0.4, 0.15, 0.05)),
    ("chains8k", 8192, 1, 800, 1.01, (0.05, 0.05, 0.25, 0.5, 0.1, 0.05)),
    ("long16k", 16384, 1, 400, 1.01, (0.05, 0.1, 0.25, 0.4, 0.15, 0.05)),
    ("chains16k", 16384, 1, 1200, 1.01, (0.05, 0.05, 0.25, 0.5, 0.1, 0.05)),
]
KINDS = tasks.RULER_KINDS + tasks.EVAL_KINDS
# Task rows draw the kinds that need several lookups or a multi-token key twice as often: after `text`,
# multivalue, vartrack and records lagged the single-needle kinds at every length.
TASK_DRAW = KINDS + ("multivalue", "vartrack", "records", "multikey")
# The chains stages (after run8: multivalue 0 %, vartrack 0 %, both failing on the token that picks the
# next line) give half their task rows to those two kinds and to drills of them.
CHAINS_DRAW = KINDS + ("multivalue", "vartrack", "vartrack_drill", "vartrack_drill", "multivalue_drill",
                       "multivalue_drill", "vartrack_drill", "multivalue_drill")
FAR_SHARE = 0.5  # share of training task documents whose needles lean far back (tasks.place)
BOS, EOS = 1, 2
LOOKUP, TEXT = 1, 2  # what the loss is taken on: copied/looked-up tokens, or every token of natural text
TEXT_WEIGHT = 0.5  # text rows add their mean loss at this weight, so their many tokens cannot drown lookups
COPY_POOL = 512  # copy rows draw their segments from this many most frequent tokens


class Data:
    def __init__(self, sp_path, seed, corpus_copy=None):
        import sentencepiece
        self.sp = sentencepiece.SentencePieceProcessor(model_file=sp_path)
        kjv, gcide = corpus.kjv_lines(corpus_copy), corpus.gcide_entries(corpus_copy)
        self.names, self.words = corpus.names_and_words(kjv)
        tasks.NAMES[:] = self.names
        self.hay = tasks.Haystack(kjv, gcide)
        self.rng = random.Random(seed)
        # Copy rows draw from the most frequent tokens: a copy circuit must be learned for every token
        # it copies, and rare ones are seen too seldom for that to happen on this budget.
        from collections import Counter
        counts = Counter(self.sp.encode("".join(self.hay.pieces(random.Random(0), 400000, "mixed"))))
        self.pool = [t for t, _ in counts.most_common(COPY_POOL + 3) if t > 2][:COPY_POOL]
        self.digits = [self.sp.piece_to_id(str(d)) for d in range(10)]
        self.repeat_ids = 64  # repeat rows draw ids 3 .. 3 + repeat_ids - 1 (the induct curriculum widens it)

    def text(self, n):
        ids = self.sp.encode("".join(self.hay.pieces(self.rng, n * 3, self.rng.choice(("kjv", "gcide", "mixed")))))
        return ids[:n]

    def copy_row(self, n):
        """Text with 2-4 segments of 8-32 random tokens, each repeated later; loss on the repeats after
        their first token. Random tokens are predictable only by copying: what forms induction heads
        (copying natural text does not: a language model predicts much of it without looking back)."""
        ids = self.text(n)
        mask = [0] * len(ids)
        for _ in range(self.rng.randint(2, 4)):
            L = self.rng.randint(8, 32)
            if len(ids) < 2 * L + 8:
                break
            seg = [self.rng.choice(self.pool) for _ in range(L)]
            a = self.rng.randrange(0, len(ids) - L + 1)  # insert both copies: earlier segments stay whole
            b = self.rng.randrange(a, len(ids) + 1)
            ids = ids[:a] + seg + ids[a:b] + seg + ids[b:]
            mask = mask[:a] + [0] * L + mask[a:b] + [0] + [1] * (L - 1) + mask[b:]
        return ids[:n], [bool(v) for v in mask[:n]]

    def repeat_row(self, n):
        """Only random tokens: 1-4 segments, each written twice in a row; loss on the second copy after
        its first token. Nothing else to predict, so the copy signal is the whole gradient."""
        ids, mask = [], []
        while len(ids) < n - 8:
            L = self.rng.randint(4, max(4, min(32, (n - len(ids)) // 2)))  # short: the plateau grows with distance
            seg = [self.rng.randrange(3, 3 + self.repeat_ids) for _ in range(L)]
            ids += seg + seg
            mask += [0] * L + [0] + [1] * (L - 1)
        return ids[:n], [bool(v) for v in mask[:n]]

    def digit_row(self, n):
        """Random strings of 6-24 digits, each written twice in a row; loss on the second copy from its
        third token on (before that the start of the copy is unknowable). The previous token alone
        matches a tenth of the string, so only matching the last few tokens copies it right."""
        ids, mask = [], []
        while len(ids) < n - 12:
            L = self.rng.randint(6, max(6, min(24, (n - len(ids)) // 2)))
            seg = [self.rng.choice(self.digits) for _ in range(L)]
            ids += seg + seg
            mask += [0] * L + [0, 0] + [1] * (L - 2)
        return ids[:n], [bool(v) for v in mask[:n]]

    def row(self, T, mix, draw=TASK_DRAW):
        """One training row of exactly T tokens: BOS + document(s); pad with EOS (no loss)."""
        ids, mask = [], []
        while len(ids) < T - 16:
            room = T - len(ids) - 1
            r = self.rng.random()
            if r < mix[0]:
                d, m = self.repeat_row(room)
            elif r < mix[0] + mix[1]:
                d, m = self.copy_row(room)
            elif r >= sum(mix[:5]):
                d, m = self.digit_row(room)
            elif r < mix[0] + mix[1] + mix[2]:
                d = self.text(self.rng.randint(min(room, 64), room))
                m = [TEXT] * len(d)
            else:
                # the first document of a row: as long as the row half the time (needles up to T back)
                n = room if ids or self.rng.random() < 0.5 else self.rng.randint(min(room, 200 + room // 4), room)
                kind = "drill" if r >= sum(mix[:4]) else self.rng.choice(draw)
                doc = tasks.build(self.rng, self.sp, kind, self.hay, self.names, self.words, n, more=True)
                if doc is None:
                    break
                d, m = doc
            ids += [BOS] + d
            mask += [False] + [TEXT if v == TEXT else LOOKUP if v else 0 for v in m]
            if not ids or mix[2] == 0:
                break
        ids, mask = ids[:T], mask[:T]
        pad = T - len(ids)
        return ids + [EOS] * pad, mask + [False] * pad

    def batch(self, T, B, mix, draw=TASK_DRAW):
        tasks.FAR_SHARE = FAR_SHARE
        rows = [self.row(T, mix, draw) for _ in range(B)]
        tasks.FAR_SHARE = 0.0
        return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


_DATA = None  # the Data a batch worker process inherited (fork)


def _worker_seed(seed):
    _DATA.rng.seed(seed * 100003 + os.getpid())  # each worker its own stream (not replayed on --resume)


def _worker_batch(args):
    *batch_args, repeat_ids = args
    _DATA.repeat_ids = repeat_ids  # the induct curriculum widens in the training process
    ids, mask = _DATA.batch(*batch_args)
    return ids.numpy(), mask.numpy()


def batches(data, pool, ahead, T, B, mix, draw):
    """Endless batches, made `ahead` at a time by the worker pool when there is one (a GPU outruns one
    Python row maker); a bounded queue, so the next stage waits behind at most `ahead` of this one's."""
    if pool is None:
        while True:
            yield data.batch(T, B, mix, draw)
    ask = lambda: pool.apply_async(_worker_batch, ((T, B, mix, draw, data.repeat_ids),))  # noqa: E731
    queue = collections.deque(ask() for _ in range(ahead))
    while True:
        ids, mask = queue.popleft().get()
        queue.append(ask())
        yield torch.from_numpy(ids), torch.from_numpy(mask)


@torch.no_grad()
def copy_accuracy(model, data, T, digits=False, rows=16):
    """Share of the repeated tokens of fresh random-repeat (or digit) rows predicted by argmax: induction
    at work."""
    model.eval()
    saved = data.rng.getstate(), data.repeat_ids
    data.rng.seed(4321 + T)
    data.repeat_ids = data.sp.vocab_size() - 3  # every id: the accuracy the curriculum is heading for
    ids, mask = data.batch(T, rows, (0.0, 0.0, 0.0, 0.0, 0.0, 1.0) if digits else (1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
    data.rng.setstate(saved[0])
    data.repeat_ids = saved[1]
    dev = next(model.parameters()).device
    ids, mask = ids.to(dev), mask.to(dev)
    sel = mask[:, 1:] > 0
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        logits = model(ids[:, :-1], sel)
    model.train()
    return (logits.argmax(-1) == ids[:, 1:][sel]).float().mean().item()


@torch.no_grad()
def lookup_accuracy(model, data, T, n_per_kind=8):
    """Per kind: the share of documents whose every answer token is the argmax (= greedy exact match)."""
    model.eval()
    dev = next(model.parameters()).device
    rng = random.Random(1234 + T)
    acc = {}
    for kind in KINDS:
        ok = 0
        for _ in range(n_per_kind):
            doc = None
            while doc is None:  # a draw whose needles alone do not fit T is drawn again
                doc = tasks.build(rng, data.sp, kind, data.hay, data.names, data.words, T - 1)
            ids, mask = doc
            x = torch.tensor([[BOS] + ids], device=dev)
            tgt = torch.tensor([ids + [EOS]], device=dev)
            sel = torch.tensor([[m for m in mask] + [False]], device=dev)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(x, sel)
            ok += bool((logits.argmax(-1) == tgt[sel]).all())
        acc[kind] = ok / n_per_kind
    model.train()
    return acc


def save(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="checkpoint and log folder (outside the repository)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__),
                                                        "../../../shared/models/kjv-tiny/hf/tokenizer.model"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--init", help="start from this GGUF's weights (one export.py wrote) instead of random ones")
    ap.add_argument("--stage", help="start at this stage (with --init: continue a shipped model)")
    ap.add_argument("--steps", type=int, help="steps of the --stage stage instead of its default")
    ap.add_argument("--batch", type=int, help="rows per step of the --stage stage instead of its default")
    ap.add_argument("--stop-after", type=int,
                    help="end the run after this step of the --stage stage (its schedule still spans --steps)")
    ap.add_argument("--until", default="chains4k",
                    help="end the run after this stage, annealed (default chains4k: the 4K recipe; chains8k for 8K)")
    ap.add_argument("--rope-theta", type=float, default=Config.rope_theta,
                    help="RoPE base (the shipped model's last run raised it to 20000: 4K lookups 52 -> 76 %% untrained)")
    ap.add_argument("--layers", type=int, default=Config.n_layer)
    ap.add_argument("--heads", type=int, default=Config.n_head, help="query heads (of --head-dim each)")
    ap.add_argument("--kv-heads", type=int, default=Config.n_kv_head)
    ap.add_argument("--corpus", help="train from this copy of the text (corpus.py DIR) instead of the Debian packages")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--workers", type=int, default=0, help="processes making batches (0: the training process)")
    ap.add_argument("--batch-scale", type=int, default=1, help="every stage's batch (and --batch) times this (a GPU's share)")
    ap.add_argument("--time-limit", type=float, help="seconds the whole run may take (see the module's note)")
    a = ap.parse_args()
    t_start = time.time()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    ck = os.path.join(a.out, "ckpt.pt")
    torch.manual_seed(a.seed)
    last = [s[0] for s in STAGES].index(a.until)
    cfg = Config(rope_theta=a.rope_theta, n_layer=a.layers, n_head=a.heads, n_kv_head=a.kv_heads,
                 ctx=max(s[1] for s in STAGES[:last + 1]))  # the context the exported GGUF declares
    model = Llama(cfg)  # on the CPU until the batch workers are forked (no fork after CUDA work)
    stage, step, total, opt_state = 0, 0, 0, None
    data = Data(a.tokenizer, a.seed, a.corpus)
    if a.init:  # a larger cfg than the GGUF's: grown from it (grow.py)
        from export import gguf_config, load_gguf_weights
        from grow import grow
        src = gguf_config(a.init)
        sd = load_gguf_weights(a.init, src)
        model.load_state_dict(sd if (src.n_layer, src.n_head) == (cfg.n_layer, cfg.n_head) else grow(sd, src, cfg))
        data.repeat_ids = data.sp.vocab_size() - 3  # the induct curriculum is behind such a model
    if a.stage:
        stage = [s[0] for s in STAGES].index(a.stage)
    if a.resume and os.path.exists(ck):
        st = torch.load(ck, map_location="cpu")
        model.load_state_dict(st["model"])
        opt_state = st["opt"]
        stage, step, total = st["stage"], st["step"], st["total"]
        data.rng.setstate(st["rng"])
        data.repeat_ids = st["repeat_ids"]
        torch.set_rng_state(st["torch_rng"])
        print(f"resumed at stage {STAGES[stage][0] if stage < len(STAGES) else 'done'} step {step}", flush=True)
    pool = None
    if a.workers > 0:  # forked before any CUDA work, each worker inheriting `data`
        global _DATA
        _DATA = data
        pool = multiprocessing.get_context("fork").Pool(a.workers, _worker_seed, (a.seed,))
    device = torch.device(a.device)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    if opt_state:
        opt.load_state_dict(opt_state)  # its moments move to the parameters' device
    log = open(os.path.join(a.out, "log.tsv"), "a")
    json.dump(cfg.to_dict(), open(os.path.join(a.out, "config.json"), "w"))

    def checkpoint():
        save(ck, dict(model=model.state_dict(), opt=opt.state_dict(), stage=stage, step=step, total=total,
                      rng=data.rng.getstate(), repeat_ids=data.repeat_ids, torch_rng=torch.get_rng_state(),
                      cfg=cfg.to_dict()))

    while stage <= last:
        name, T, B, max_steps, goal, mix = STAGES[stage]
        if a.steps and name == a.stage:
            max_steps = a.steps
        if a.batch and name == a.stage:
            B = a.batch
        B *= a.batch_scale
        t0, step0 = time.time(), step
        draw = CHAINS_DRAW if name.startswith("chains") else TASK_DRAW
        made = batches(data, pool, 2 * a.workers, T, B, mix, draw)
        while step < max_steps:
            if step == step0 + 5:
                t5 = time.time()  # steps timed after these five (the first ones warm up a GPU)
            if a.time_limit and step == step0 + 15:  # cut to an equal share of the time left
                left = a.time_limit - (time.time() - t_start) - 30  # 30 s for the last evaluations
                per_step = (time.time() - t5) / 10
                fit = step + int(left / (last - stage + 1) / per_step)
                if fit < max_steps:
                    max_steps = max(fit, step + 1)
                    print(f"{name}: {per_step:.2f} s/step, cut to {max_steps} steps (--time-limit)", flush=True)
            lr = a.lr * min(1.0, (total + 1) / 100)  # short warm-up, then constant (through the plateau)
            if stage == last:  # the last stage anneals to a tenth: a lower loss to ship
                lr *= 1.0 - 0.9 * step / max_steps
            for g in opt.param_groups:
                g["lr"] = lr
            ids, mask = next(made)
            ids, mask = ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
            x, y, kind = ids[:, :-1], ids[:, 1:], mask[:, 1:]
            sel = kind > 0
            if not sel.any():
                continue
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = model(x, sel)
            ce = F.cross_entropy(logits.float(), y[sel], reduction="none")
            k = kind[sel]
            loss = sum(ce[k == v].mean() * w for v, w in ((LOOKUP, 1.0), (TEXT, TEXT_WEIGHT)) if (k == v).any())
            if mix[0] == 1.0 and data.repeat_ids < data.sp.vocab_size() - 3:
                hit = (logits.argmax(-1) == y[sel]).float().mean().item()
                if hit > 0.7:
                    data.repeat_ids = min(data.sp.vocab_size() - 3, data.repeat_ids * 4)
                    msg = f"{name}\t{step}\t{total}\twiden\t{data.repeat_ids}\tbatch copy accuracy {hit:.3f}"
                    print(msg, flush=True)
                    log.write(msg + "\n")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            total += 1
            line = f"{name}\t{step}\t{total}\tloss\t{loss.item():.4f}\t{(time.time() - t0) / (step - step0):.2f}s/step"
            if step % 10 == 0:
                print(line, flush=True)
            log.write(line + "\n")
            done = False
            if step % a.eval_every == 0 or step == max_steps:
                copy = copy_accuracy(model, data, T)
                digits = copy_accuracy(model, data, T, digits=True)
                acc = lookup_accuracy(model, data, T) if mix[0] < 1 else {}
                mean = sum(acc.values()) / len(acc) if acc else copy
                msg = f"{name}\t{step}\t{total}\tacc\t{mean:.3f}\tcopy={copy:.3f} digits={digits:.3f} " + " ".join(
                    f"{k}={v:.2f}" for k, v in acc.items())
                print(msg, flush=True)
                log.write(msg + "\n")
                done = mean >= goal
            log.flush()
            stop = a.stop_after and name == a.stage and step == a.stop_after  # run12 was cut so, at 700 of 1400
            if step % a.ckpt_every == 0 or done or stop or step == max_steps:
                checkpoint()
            if stop:
                print(f"stopped after step {step} of {max_steps} (--stop-after)", flush=True)
                return
            if done:
                break
        shutil.copyfile(ck, os.path.join(a.out, f"ckpt-{name}.pt"))  # each stage's end, to redo a later stage from
        stage, step = stage + 1, 0
        checkpoint()
    torch.save(dict(model=model.state_dict(), cfg=cfg.to_dict()), os.path.join(a.out, "final.pt"))
    print("training done", flush=True)


if __name__ == "__main__":
    main()
