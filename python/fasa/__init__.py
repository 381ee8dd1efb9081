"""fasa: long-context decoding with Frequency-Aware Sparse Attention.

    import fasa
    engine = fasa.Engine()                       # the bundled model; or a .gguf / Hugging Face directory
    ctx = engine.context(attn="fasa", budget=256)  # any of fasa.settings(), as `fasa run`'s flags
    print(ctx.generate("Ge1:1 In the beginning", max_tokens=16))
"""
import os

from ._fasa import Context, Error, TextStream, bench, eval, settings  # noqa: A004 (fasa.eval)
from ._fasa import policies as _builtin_policies
from ._fasa import Engine as _Engine
from ._fasa import source_model as _source_model

__all__ = ["Engine", "Context", "Error", "TextStream", "bench", "eval", "policies", "settings", "bundled_model", "register_policy"]

_python_policies = {}  # name -> fn, from register_policy


def register_policy(name, fn):
    """A policy written in Python, for engine.context(attn=name, budget=..., dense_layers=...).

    fn(layer, kv_head, queries, keys, budget) gets the GQA group's queries [n_q, head_dim] and the KV
    head's cached keys [n_tokens, head_dim] (float32, after RoPE: NumPy arrays, or where NumPy is not
    installed memoryviews, which index as keys[row, dim] and give lists with .tolist()) and returns at
    most `budget` distinct row numbers (a list, a tuple, a NumPy array of ints, ...), which every query
    head of the group attends to. It runs in the real
    decode loop under the C++ policies' contract: dense layers, and steps whose budget covers the
    context, attend to every row without calling fn; a row outside the context is an error. Slow is
    fine: it is for trying an idea before writing it in C++ (src/sparse/). fasa.eval runs the built-in
    policies only.
    """
    if not callable(fn):
        raise TypeError(f"register_policy: fn must be callable, got {fn!r}")
    if name in {p["name"] for p in _builtin_policies()}:
        raise Error(f"'{name}' is a built-in policy")
    _python_policies[name] = fn


def policies():
    """The attention policies: the built-in ones (fasa eval runs these), then those of register_policy."""
    return _builtin_policies() + [
        {"name": name, "description": (fn.__doc__ or "a policy written in Python").strip().splitlines()[0], "dense": False}
        for name, fn in _python_policies.items()]


def bundled_model():
    """The model fasa ships with: installed beside the package, else in the checkout it was built from."""
    installed = os.path.join(os.path.dirname(__file__), "models", "kjv-recall-f16.gguf")
    return installed if os.path.exists(installed) else _source_model


class Engine(_Engine):
    """A loaded model (a .gguf file or a Hugging Face directory; the bundled model by default).
    gpu_layers: as `fasa run -ngl` (0: the CPU; -1 or the layer count: the whole model on the Vulkan
    device `device`, 0 the first; docs/GPU.md says what runs there)."""

    def __init__(self, model=None, gpu_layers=0, device=0):
        super().__init__(bundled_model() if model is None else os.fspath(model), gpu_layers, device)

    def context(self, **settings):
        """A context: n_ctx, threads, and any of fasa.settings() as keywords (as `fasa run`'s flags);
        attn may name a policy from register_policy."""
        name = settings.get("attn")
        if name in _python_policies:
            settings = {k: v for k, v in settings.items() if k != "attn"}
            settings["python_policy"] = (name, _python_policies[name])
        return super().context(**settings)
