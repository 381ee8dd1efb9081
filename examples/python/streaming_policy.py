"""StreamingLLM written in Python: the first `sink` rows and the most recent ones. It runs in the real
decode loop; tests/test_fasa.py checks that it decodes exactly as the built-in `stream` policy."""
import fasa


def streaming_llm(layer, kv_head, queries, keys, budget, sink=8):
    sink = min(sink, budget)
    return list(range(sink)) + list(range(len(keys) - (budget - sink), len(keys)))


fasa.register_policy("py-stream", streaming_llm)

if __name__ == "__main__":
    engine = fasa.Engine()
    prompt = " ".join(["Ge1:1 In the beginning God created the heaven and the earth."] * 8)
    text = {attn: engine.context(attn=attn, budget=32).generate(prompt, max_tokens=32) for attn in ["py-stream", "stream"]}
    print(repr(text["py-stream"]))
    print("the same as the built-in stream policy:", text["py-stream"] == text["stream"])
