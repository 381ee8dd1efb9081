"""Generate with full attention and with FASA on the bundled model, streaming the second."""
import fasa

engine = fasa.Engine()  # or fasa.Engine("path/to/model.gguf")
prompt = "Ge1:1 In the beginning God created the heaven and the earth."
print("full:", engine.context().generate(prompt, max_tokens=24))
ctx = engine.context(attn="fasa", budget=64)  # any of fasa.settings(), as `fasa run`'s flags
print("fasa:", end=" ", flush=True)
for piece in ctx.stream(prompt, max_tokens=24):
    print(piece, end="", flush=True)
print()
print(ctx.stats())
