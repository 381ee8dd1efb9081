"""Export a trained checkpoint to GGUF (arch `llama`) and a Hugging Face directory, with golden outputs.

  python3 tools/train/export.py --weights OUT/final.pt --name kjv-recall --gguf models/kjv-recall-f16.gguf \
      --hf OUT/hf --golden tests/golden/kjv-recall

GGUF: 2-D weights F16 (or F32 with --f32), norms F32, Q/K rows permuted from the HF half-split RoPE order
to the interleaved order llama.cpp's converter writes; the tokenizer metadata is kjv-tiny's (same
vocabulary). Golden: the float32 forward pass of model.py with the weights rounded exactly as the GGUF
stores them — the last positions' logits of a few prompts and greedy continuations — for the ctest.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Llama  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_TINY = os.path.join(HERE, "../../../shared/models/kjv-tiny")
GGUF_F32, GGUF_F16 = 0, 1
T_U32, T_F32, T_BOOL, T_STR, T_ARR = 4, 6, 7, 8, 9
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
PROMPTS = [
    "Ge1:1 In the beginning God created the heaven and the earth.\nGe1:2 And the earth was",
    "There is a pass key hidden in this text. Find it and remember it.\nThe grass is green. The sky is blue.\n"
    "The pass key is 48213. Remember it. 48213 is the pass key.\nThe sun is yellow. Here we go.\n"
    "What is the pass key? The pass key is",
]
# A long-context model's golden cases add one prompt of 3758 tokens (--long-prompt): a pass key at the
# start, then filler lines; position effects (RoPE at large angles, long softmax sums) show only there.
LONG_PROMPT = ("The pass key is 71942. Remember it.\n"
               + "".join(f"Line {i}: the grass is green, the sky is blue, the sun is yellow.\n" for i in range(160))
               + "What is the pass key? The pass key is")
N_LAST = 4   # positions whose logits are kept per prompt
N_GREEDY = 16


def read_gguf(path):
    """([(key, type, value)] of a GGUF file's metadata (arrays as (elem_type, list)),
    {name: F32/F16 array, row-major [rows, cols], a view of the file's bytes})."""
    b = open(path, "rb").read()
    o = [4]

    def rd(fmt):
        v = struct.unpack_from("<" + fmt, b, o[0])[0]
        o[0] += struct.calcsize("<" + fmt)
        return v

    def rs():
        n = rd("Q")
        s = b[o[0]:o[0] + n].decode("utf-8")
        o[0] += n
        return s

    def val(t):
        if t == T_STR:
            return rs()
        if t == T_ARR:
            et, n = rd("I"), rd("Q")
            return (et, [val(et) for _ in range(n)])
        return rd(SCALAR[t])

    rd("I")
    n_tensors = rd("Q")
    kv = []
    for _ in range(rd("Q")):
        k = rs()
        t = rd("I")
        kv.append((k, t, val(t)))
    infos = []
    for _ in range(n_tensors):
        name = rs()
        dims = [rd("Q") for _ in range(rd("I"))]
        infos.append((name, dims, rd("I"), rd("Q")))
    align = next((v for k, _, v in kv if k == "general.alignment"), 32)
    base = (o[0] + align - 1) // align * align
    tensors = {}
    for name, dims, typ, off in infos:
        if typ not in (GGUF_F32, GGUF_F16):
            raise ValueError(f"{path}: tensor {name} is neither F32 nor F16")
        n = int(np.prod(dims))
        a = np.frombuffer(b, np.float16 if typ == GGUF_F16 else np.float32, n, base + off)
        tensors[name] = a.reshape(list(reversed(dims)))
    return kv, tensors


class GgufWriter:
    def __init__(self):
        self.kv, self.tensors = [], []

    def add(self, key, typ, value):
        self.kv.append((key, typ, value))

    def tensor(self, name, array):
        self.tensors.append((name, np.ascontiguousarray(array)))

    @staticmethod
    def _str(s):
        e = s.encode("utf-8")
        return struct.pack("<Q", len(e)) + e

    def _val(self, t, v):
        if t == T_STR:
            return self._str(v)
        if t == T_ARR:
            et, items = v
            return struct.pack("<IQ", et, len(items)) + b"".join(self._val(et, x) for x in items)
        return struct.pack("<" + SCALAR[t], v)

    def write(self, path, align=32):
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for k, t, v in self.kv:
            head += self._str(k) + struct.pack("<I", t) + self._val(t, v)
        off, infos, blobs = 0, b"", []
        for name, a in self.tensors:
            typ = GGUF_F16 if a.dtype == np.float16 else GGUF_F32
            dims = list(reversed(a.shape))  # GGUF lists the innermost (column) dimension first
            infos += self._str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            infos += struct.pack("<IQ", typ, off)
            blobs.append((off, a.tobytes()))
            off = (off + a.nbytes + align - 1) // align * align
        head += infos
        head += b"\0" * ((-len(head)) % align)
        with open(path + ".tmp", "wb") as f:
            f.write(head)
            for o, blob in blobs:
                f.write(b"\0" * (len(head) + o - f.tell()))
                f.write(blob)
        os.replace(path + ".tmp", path)


def permute_rope(w, n_head):
    """HF half-split RoPE rows -> interleaved pairs (what llama.cpp's converter does for Q and K)."""
    out, inp = w.shape
    hd = out // n_head
    return w.reshape(n_head, 2, hd // 2, inp).swapaxes(1, 2).reshape(out, inp)


def unpermute_rope(w, n_head):
    """The inverse of permute_rope: GGUF's interleaved pairs -> HF half-split rows."""
    out, inp = w.shape
    hd = out // n_head
    return w.reshape(n_head, hd // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def gguf_config(path):
    """The model.py Config of a GGUF this script wrote."""
    meta = {k: v for k, _, v in read_gguf(path)[0]}
    n = lambda key: meta["llama." + key]  # noqa: E731
    return Config(vocab=n("vocab_size"), dim=n("embedding_length"), n_layer=n("block_count"),
                  n_head=n("attention.head_count"), n_kv_head=n("attention.head_count_kv"),
                  ffn=n("feed_forward_length"), rope_theta=n("rope.freq_base"),
                  norm_eps=n("attention.layer_norm_rms_epsilon"), ctx=n("context_length"),
                  head_dim=meta.get("llama.attention.key_length", n("embedding_length") // n("attention.head_count")))


def load_gguf_weights(path, cfg):
    """A model.py state dict from a GGUF this script wrote (F16 or F32) of the shape cfg: to continue
    training from a shipped model when its checkpoints are gone."""
    _, t = read_gguf(path)
    sd = {"embed_tokens.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"],
          "lm_head.weight": t["output.weight"]}
    for i in range(cfg.n_layer):
        p, b = f"layers.{i}.", f"blk.{i}."
        sd[p + "input_layernorm.weight"] = t[b + "attn_norm.weight"]
        sd[p + "self_attn.q_proj.weight"] = unpermute_rope(t[b + "attn_q.weight"], cfg.n_head)
        sd[p + "self_attn.k_proj.weight"] = unpermute_rope(t[b + "attn_k.weight"], cfg.n_kv_head)
        sd[p + "self_attn.v_proj.weight"] = t[b + "attn_v.weight"]
        sd[p + "self_attn.o_proj.weight"] = t[b + "attn_output.weight"]
        sd[p + "post_attention_layernorm.weight"] = t[b + "ffn_norm.weight"]
        sd[p + "mlp.gate_proj.weight"] = t[b + "ffn_gate.weight"]
        sd[p + "mlp.up_proj.weight"] = t[b + "ffn_up.weight"]
        sd[p + "mlp.down_proj.weight"] = t[b + "ffn_down.weight"]
    return {k: torch.from_numpy(v.astype(np.float32)) for k, v in sd.items()}


def rounded(sd, f16):
    """The weights as the GGUF stores them: 2-D ones through float16 when f16, all in float32."""
    return {k: (v.half().float() if f16 and v.dim() == 2 else v.float()) for k, v in sd.items()}


def write_gguf(path, cfg, sd, name, f16):
    w = GgufWriter()
    w.add("general.architecture", T_STR, "llama")
    w.add("general.name", T_STR, name)
    w.add("general.file_type", T_U32, GGUF_F16 if f16 else GGUF_F32)
    w.add("general.alignment", T_U32, 32)
    for k, v in [("context_length", cfg.ctx), ("embedding_length", cfg.dim), ("block_count", cfg.n_layer),
                 ("feed_forward_length", cfg.ffn), ("rope.dimension_count", cfg.head_dim),
                 ("attention.key_length", cfg.head_dim), ("attention.value_length", cfg.head_dim),
                 ("attention.head_count", cfg.n_head), ("attention.head_count_kv", cfg.n_kv_head),
                 ("vocab_size", cfg.vocab)]:
        w.add("llama." + k, T_U32, v)
    w.add("llama.attention.layer_norm_rms_epsilon", T_F32, cfg.norm_eps)
    w.add("llama.rope.freq_base", T_F32, cfg.rope_theta)
    for k, t, v in read_gguf(os.path.join(SHARED_TINY, "kjv-tiny-f32.gguf"))[0]:
        if k.startswith("tokenizer."):
            w.add(k, t, v)

    def mat(key, rope_heads=0):
        a = sd[key].float().numpy()
        if rope_heads:
            a = permute_rope(a, rope_heads)
        return a.astype(np.float16) if f16 else a.astype(np.float32)

    w.tensor("token_embd.weight", mat("embed_tokens.weight"))
    for i in range(cfg.n_layer):
        p, b = f"layers.{i}.", f"blk.{i}."
        w.tensor(b + "attn_norm.weight", sd[p + "input_layernorm.weight"].float().numpy())
        w.tensor(b + "attn_q.weight", mat(p + "self_attn.q_proj.weight", cfg.n_head))
        w.tensor(b + "attn_k.weight", mat(p + "self_attn.k_proj.weight", cfg.n_kv_head))
        w.tensor(b + "attn_v.weight", mat(p + "self_attn.v_proj.weight"))
        w.tensor(b + "attn_output.weight", mat(p + "self_attn.o_proj.weight"))
        w.tensor(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"].float().numpy())
        w.tensor(b + "ffn_gate.weight", mat(p + "mlp.gate_proj.weight"))
        w.tensor(b + "ffn_up.weight", mat(p + "mlp.up_proj.weight"))
        w.tensor(b + "ffn_down.weight", mat(p + "mlp.down_proj.weight"))
    w.tensor("output_norm.weight", sd["norm.weight"].float().numpy())
    w.tensor("output.weight", mat("lm_head.weight"))
    w.write(path)


def write_safetensors(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k, v in tensors.items():
        a = v.float().numpy().astype(np.float32)
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for blob in blobs:
            f.write(blob)


def write_hf(folder, cfg, sd):
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), {"model." + k if k != "lm_head.weight" else k: v
                                                                  for k, v in sd.items()})
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.dim,
               "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
               "num_key_value_heads": cfg.n_kv_head, "head_dim": cfg.head_dim, "max_position_embeddings": cfg.ctx,
               "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "vocab_size": cfg.vocab,
               "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
               "attention_bias": False, "mlp_bias": False, "rope_scaling": None, "torch_dtype": "float32"},
              open(os.path.join(folder, "config.json"), "w"), indent=2)
    for f in ("tokenizer.model", "tokenizer_config.json"):
        with open(os.path.join(SHARED_TINY, "hf", f), "rb") as src, open(os.path.join(folder, f), "wb") as dst:
            dst.write(src.read())


@torch.no_grad()
def write_golden(folder, cfg, sd, f16, sp, gguf_name, prompts=PROMPTS):
    os.makedirs(folder, exist_ok=True)
    m = Llama(cfg)
    m.load_state_dict(rounded(sd, f16))
    m.eval()
    cases = []
    for i, text in enumerate(prompts):
        ids = [1] + sp.encode(text)
        logits = m(torch.tensor([ids]))[0].float()
        last = logits[-N_LAST:].numpy().astype("<f4")
        fname = f"logits_p{i}.bin"
        last.tofile(os.path.join(folder, fname))
        seq = list(ids)
        for _ in range(N_GREEDY):
            seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
        cases.append({"prompt": text, "ids": ids, "last_positions": N_LAST, "logits": fname,
                      "greedy": seq[len(ids):]})
    json.dump({"model": gguf_name, "weights": "f16" if f16 else "f32", "vocab": cfg.vocab,
               "note": "float32 forward pass of tools/train/model.py with the weights rounded as the GGUF stores them; "
                       "logits of the last `last_positions` positions, row-major [last_positions, vocab]",
               "cases": cases}, open(os.path.join(folder, "golden.json"), "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True, help="final.pt (a state dict) or ckpt.pt")
    ap.add_argument("--name", default="kjv-recall")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--f32", action="store_true", help="F32 2-D weights instead of F16")
    ap.add_argument("--hf", help="also write a Hugging Face directory here (F32 safetensors)")
    ap.add_argument("--golden", help="write golden logits and greedy continuations here")
    ap.add_argument("--long-prompt", action="store_true", help="golden cases include a 3758-token prompt")
    a = ap.parse_args()
    st = torch.load(a.weights, map_location="cpu")
    sd = st["model"] if "model" in st else st
    cfg = Config(**st["cfg"]) if "cfg" in st else Config()
    f16 = not a.f32
    write_gguf(a.gguf, cfg, sd, a.name, f16)
    if a.hf:
        write_hf(a.hf, cfg, sd)
    if a.golden:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(SHARED_TINY, "hf/tokenizer.model"))
        write_golden(a.golden, cfg, sd, f16, sp, os.path.basename(a.gguf), PROMPTS + [LONG_PROMPT] * a.long_prompt)
    print("wrote", a.gguf, a.hf or "", a.golden or "")


if __name__ == "__main__":
    main()
