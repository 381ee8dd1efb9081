"""Generate with full attention and with FASA on the bundled model, streaming the second. The prompt is
long enough (over 1024 tokens) for FASA's automatic profile to be measured during its prefill, so FASA
then reads 64 of the cached tokens per head."""
import fasa

engine = fasa.Engine()  # or fasa.Engine("path/to/model.gguf")
prompt = " ".join(["Ge1:1 In the beginning God created the heaven and the earth."] * 70)
print("full:", engine.context().generate(prompt, max_tokens=24))
ctx = engine.context(attn="fasa", budget=64)  # any of fasa.settings(), as `fasa run`'s flags
print("fasa:", end=" ", flush=True)
for piece in ctx.stream(prompt, max_tokens=24):
    print(piece, end="", flush=True)
print()
print(ctx.stats())
