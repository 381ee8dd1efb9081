// The official `openai` npm client against `fasa serve`, as a JavaScript user's code would call it:
// models list/retrieve, chat (plain and streamed, developer role), completions with logprobs and echo,
// the prompt cache in usage, an unsupported field and a wrong API key as errors.
// Usage: node client.mjs BASE_URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
assert.equal(ids.length, 1, "one model");
const model = ids[0];
assert.equal((await client.models.retrieve(model)).id, model);

const messages = [
  { role: "developer", content: "Answer from the Bible." },
  { role: "user", content: "Ge1:1 In the beginning God created the heaven and the earth." },
];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
const reply = chat.choices[0].message.content;
assert.ok(reply.length > 0, "a chat reply");
assert.equal(chat.usage.completion_tokens <= 12, true);

let streamed = "";
const stream = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, stream: true });
for await (const part of stream) streamed += part.choices[0]?.delta?.content ?? "";
assert.equal(streamed, reply, "streamed chat = plain chat");

// The same conversation again: its prompt is in the slot's cache.
const again = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, "cached tokens reported");
assert.equal(again.choices[0].message.content, reply);

const prompt = "Ge1:3 And God said, Let there be light:";
const completion = await client.completions.create({ model, prompt, max_tokens: 4, temperature: 0, logprobs: 2, echo: true });
const lp = completion.choices[0].logprobs;
assert.equal(lp.tokens.length, completion.usage.prompt_tokens + completion.usage.completion_tokens);
assert.equal(lp.token_logprobs[0], null, "nothing predicts the first token");
for (const x of lp.token_logprobs.slice(1)) assert.ok(x <= 0, "log-probabilities are <= 0");
assert.ok(completion.choices[0].text.startsWith(prompt.slice(0, 10)), "echo puts the prompt first");

const chatLogprobs = await client.chat.completions.create({ model, messages, max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2 });
assert.equal(chatLogprobs.choices[0].logprobs.content.length, chatLogprobs.usage.completion_tokens);

await assert.rejects(
  client.chat.completions.create({ model, messages, tools: [{ type: "function", function: { name: "f", parameters: {} } }] }),
  (e) => e instanceof OpenAI.BadRequestError && /tools/.test(e.message),
);
const intruder = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
await assert.rejects(intruder.models.list(), (e) => e instanceof OpenAI.AuthenticationError);

console.log("the openai npm client against fasa serve: every check passed");
