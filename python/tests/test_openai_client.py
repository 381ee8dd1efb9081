"""The official `openai` Python client against `fasa serve`, as a user's code calls it: models, chat
(plain, streamed with usage, developer role, logprobs), completions (logprobs, echo, stop strings), the
prompt cache in usage, fasa's own fields through extra_body and the policy that ran in each reply's timings,
and errors as the client's typed exceptions.

The client comes from python/requirements-test.txt (scripts/install-deps.sh puts it in .venv/). Where it
is missing the tests skip with a message; FASA_REQUIRE_TEST_DEPS=1 (CI) makes that a failure.
"""
import os
import re

import pytest

from serve import serve

KEY = "test-key"
MESSAGES = [
    {"role": "developer", "content": "Answer from the Bible."},
    {"role": "user", "content": "Ge1:1 In the beginning God created the heaven and the earth."},
]

try:
    import openai
except ImportError:
    if os.environ.get("FASA_REQUIRE_TEST_DEPS"):
        raise
    pytest.skip("the openai client is not installed (bash scripts/install-deps.sh puts it in .venv/)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def server():
    """`fasa serve` with an API key: its OpenAI base URL."""
    with serve("--api-key", KEY) as base:
        yield base + "/v1"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client):
    ids = [m.id for m in client.models.list()]
    assert len(ids) == 1
    assert client.models.retrieve(ids[0]).id == ids[0]
    return ids[0]


def test_chat_plain_streamed_and_cached(client, model):
    chat = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0)
    reply = chat.choices[0].message.content
    assert reply and chat.usage.completion_tokens <= 12
    chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply
    assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens  # the usage chunk comes last
    again = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # the conversation's prompt was in the slot
    assert again.choices[0].message.content == reply


def test_logprobs_echo_and_stop(client, model):
    prompt = "Ge1:3 And God said, Let there be light:"
    c = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, logprobs=2, echo=True)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == c.usage.prompt_tokens + c.usage.completion_tokens
    assert lp.token_logprobs[0] is None  # nothing predicts the first token
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert c.choices[0].text.startswith(prompt)
    chat = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3, temperature=0,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)
    full = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0).choices[0].text
    stop = full.strip().split()[1]  # a word the reply writes after its first
    cut = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].text == full[:full.index(stop)]


def test_policy_through_extra_body(client, model):
    prompt = " ".join(["Ge1:1 In the beginning God created the heaven and the earth."] * 12)
    args = dict(model=model, prompt=prompt, max_tokens=8, temperature=0)
    full = client.completions.create(**args)
    covering = client.completions.create(**args, extra_body={"attn": "fasa", "budget": 100000, "fcs": 8})
    assert covering.choices[0].text == full.choices[0].text
    # Each reply says what attended: FASA on a prompt too short to measure its profile ran full attention
    assert full.timings["policy"] == "full"
    assert re.match(r"fasa: full attention \(no profile of this model yet.* it needs 1024 tokens\)$", covering.timings["policy"])
    stream = client.completions.create(**args, extra_body={"attn": "stream", "budget": 16})
    assert stream.timings["policy"] == "stream: budget 16 tokens per head"
    with pytest.raises(openai.BadRequestError, match="budget"):
        client.completions.create(**args, extra_body={"attn": "fasa", "budget": "lots"})


def test_errors_are_the_clients_typed_exceptions(server, client, model):
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model=model, messages=MESSAGES,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server, api_key="wrong-key", max_retries=0).models.list()
