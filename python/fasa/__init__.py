"""fasa: long-context decoding with Frequency-Aware Sparse Attention.

    import fasa
    engine = fasa.Engine()                       # the bundled model; or a .gguf / Hugging Face directory
    ctx = engine.context(attn="fasa", budget=256)  # any of fasa.settings(), as `fasa run`'s flags
    print(ctx.generate("Ge1:1 In the beginning", max_tokens=16))
"""
import os

from ._fasa import Context, Error, TextStream, policies, settings
from ._fasa import Engine as _Engine
from ._fasa import source_model as _source_model

__all__ = ["Engine", "Context", "Error", "TextStream", "policies", "settings", "bundled_model"]


def bundled_model():
    """The model fasa ships with: installed beside the package, else in the checkout it was built from."""
    installed = os.path.join(os.path.dirname(__file__), "models", "kjv-recall-f16.gguf")
    return installed if os.path.exists(installed) else _source_model


class Engine(_Engine):
    """A loaded model (a .gguf file or a Hugging Face directory; the bundled model by default)."""

    def __init__(self, model=None):
        super().__init__(bundled_model() if model is None else os.fspath(model))
