"""fasa: long-context decoding with Frequency-Aware Sparse Attention.

    import fasa
    engine = fasa.Engine()                       # the bundled model; or a .gguf / Hugging Face directory
    ctx = engine.context(attn="fasa", budget=256)  # any of fasa.settings(), as `fasa run`'s flags
    print(ctx.generate("Ge1:1 In the beginning", max_tokens=16))
"""
import os

from ._fasa import Context, Error, TextStream, bench, eval, policies, settings  # noqa: A004 (fasa.eval)
from ._fasa import Engine as _Engine
from ._fasa import register_policy as _register_policy
from ._fasa import source_model as _source_model

__all__ = ["Engine", "Context", "Error", "TextStream", "bench", "eval", "policies", "settings", "bundled_model", "register_policy"]


def register_policy(name, fn):
    """A policy written in Python, for engine.context(attn=name, budget=..., dense_layers=...).

    fn(layer, kv_head, queries, keys, budget) gets the GQA group's queries [n_q, head_dim] and the KV
    head's cached keys [n_tokens, head_dim] (float32, after RoPE: NumPy arrays, or where NumPy is not
    installed memoryviews, which index as keys[row, dim] and give lists with .tolist()) and returns at
    most `budget` distinct row numbers (a list, a tuple, a NumPy array of ints, ...), which every query
    head of the group attends to. It runs in the real
    decode loop under the C++ policies' contract: dense layers, and steps whose budget covers the
    context, attend to every row without calling fn; a row outside the context is an error. Slow is
    fine: it is for trying an idea before writing it in C++ (src/sparse/). Once registered, the name
    works wherever a built-in policy's does: engine.context(attn=name), fasa.eval's and fasa.bench's
    attn lists (with settings too: "name:dense_layers=1"). A name is letters, digits, '_' and '-'; registering it
    again replaces the function.
    """
    if not callable(fn):
        raise TypeError(f"register_policy: fn must be callable, got {fn!r}")
    doc = (fn.__doc__ or "").strip()
    _register_policy(name, doc.splitlines()[0] if doc else "a policy written in Python", fn)


def bundled_model():
    """The model fasa ships with: installed beside the package, else in the checkout it was built from."""
    installed = os.path.join(os.path.dirname(__file__), "models", "kjv-recall-f16.gguf")
    return installed if os.path.exists(installed) else _source_model


class Engine(_Engine):
    """A loaded model (a .gguf file or a Hugging Face directory; the bundled model by default).
    gpu_layers: as `fasa run -ngl` (0: the CPU; -1 or the layer count: the whole model on the Vulkan
    device `device`, 0 the first; docs/GPU.md says what runs there). mmap=False: the files read into
    memory instead of mapped (`--no-mmap`); mlock=True: the weights locked in RAM (`--mlock`)."""

    def __init__(self, model=None, gpu_layers=0, device=0, mmap=True, mlock=False):
        super().__init__(bundled_model() if model is None else os.fspath(model), gpu_layers, device, mmap, mlock)

