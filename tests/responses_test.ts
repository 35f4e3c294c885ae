/**
 * The OpenAI Responses dialect through the client (`api: "responses"`), against a fake that enforces the
 * API's rules: answers, calls, usage, finish reasons, reasoning items carried back only to where they came
 * from, retries, errors without the key, and whole turns of the loop — each streamed and whole.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { LlmError } from "../src/errors.ts";
import { HttpLLM, type HttpLLMOptions } from "../src/llm/client.ts";
import type { BodyOptions, Dialect } from "../src/llm/dialect.ts";
import { ANTHROPIC_MESSAGES } from "../src/llm/anthropic.ts";
import { CHAT_COMPLETIONS } from "../src/llm/stream.ts";
import { OPENAI_RESPONSES } from "../src/llm/responses.ts";
import { modelOrigin } from "../src/llm/wire.ts";
import type { Message, ToolSchema } from "../src/types.ts";
import { harness, keyOf } from "./_harness.ts";
import { llmError, recordingSleep } from "./_openai_stubs.ts";
import { type FakeReply, fixture, type ResponsesFake, responsesFake } from "./_responses_fake.ts";

const KEY = "sk-test-SENTINEL-123";
const BASE = "https://api.openai.test/v1";
const MODEL = "gpt-5";
const SECRET = "SECRET-REASONING";
const ASK: Message[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "what is 6*7?" },
];
const CALCULATOR: ToolSchema = {
  name: "calculator",
  description: "Evaluates arithmetic",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
};

function client(fake: ResponsesFake, stream: boolean, options: Partial<HttpLLMOptions> = {}) {
  const { sleep, delays } = recordingSleep();
  const llm = new HttpLLM({
    api: "responses",
    baseUrl: BASE,
    apiKey: KEY,
    model: MODEL,
    stream,
    retries: 0,
    fetch: fake.fetch,
    sleep,
    ...options,
  });
  return { llm, delays };
}

/** The output items of a response fixture. */
function outputOf(name: string): Record<string, unknown>[] {
  const reply = fixture(name) as { response: { output: Record<string, unknown>[] } };
  return reply.response.output;
}

const BODY_OPTIONS: BodyOptions = {
  model: MODEL,
  stream: false,
  responseFormat: null,
  origin: modelOrigin(BASE, MODEL),
  reasoningEffort: null,
  thinkingBudget: null,
  maxOutputTokens: null,
  cacheKey: null,
  toolChoice: "auto",
};

for (const stream of [true, false]) {
  const mode = stream ? "streamed" : "whole";

  Deno.test(`responses (${mode}): a text answer comes back with its usage and "stop", from a stateless request`, async () => {
    const fake = responsesFake([fixture("text")], KEY);
    const deltas: string[] = [];
    const reply = await client(fake, stream).llm.chat(ASK, { onDelta: (text) => deltas.push(text) });
    assert.equal(reply.content, "The capital of France is Paris.");
    assert.deepEqual(reply.toolCalls, []);
    assert.equal(reply.finishReason, "stop");
    assert.equal(reply.model, "gpt-5-2025-08-07");
    assert.deepEqual(reply.usage, {
      promptTokens: 21,
      completionTokens: 8,
      totalTokens: 29,
      cachedTokens: 0,
    });
    assert.equal(reply.providerState, undefined);
    if (stream) assert.ok(deltas.length > 1, "text arrives in pieces");
    assert.equal(deltas.join(""), stream ? reply.content : "");
    const [sent] = fake.requests;
    assert.deepEqual(sent.input, [{ role: "system", content: "Be brief." }, {
      role: "user",
      content: "what is 6*7?",
    }]);
    assert.equal(sent.store, false);
    assert.deepEqual(sent.include, ["reasoning.encrypted_content"]);
    assert.equal(sent.stream, stream ? true : undefined);
    assert.equal("tools" in sent, false, "no tools: no tools field");
  });

  Deno.test(`responses (${mode}): a function call comes back as a tool call with its call_id, "tool_calls", no text`, async () => {
    const fake = responsesFake([fixture("tool_call")], KEY);
    const reply = await client(fake, stream).llm.chat(ASK, { tools: [CALCULATOR] });
    assert.equal(reply.content, null);
    assert.deepEqual(reply.toolCalls, [{
      id: "call_6x7",
      name: "calculator",
      arguments: '{"expression":"6*7"}',
    }]);
    assert.equal(reply.finishReason, "tool_calls");
    assert.deepEqual(fake.requests[0].tools, [{ type: "function", ...CALCULATOR, strict: false }]);
  });

  Deno.test(`responses (${mode}): two parallel function calls come back in their output order`, async () => {
    const fake = responsesFake([fixture("parallel_calls")], KEY);
    const reply = await client(fake, stream).llm.chat(ASK, { tools: [CALCULATOR] });
    assert.deepEqual(reply.toolCalls, [
      { id: "call_a", name: "calculator", arguments: '{"expression":"6*7"}' },
      { id: "call_b", name: "calculator", arguments: '{"expression":"2+3"}' },
    ]);
    assert.equal(reply.finishReason, "tool_calls");
    assert.deepEqual(reply.usage?.totalTokens, 122);
  });

  Deno.test(`responses (${mode}): a reasoning item is kept whole in the provider state, never in the text, and goes back unchanged before its call`, async () => {
    const fake = responsesFake([fixture("reasoning_call"), fixture("text")], KEY);
    const { llm } = client(fake, stream);
    const deltas: string[] = [];
    const reply = await llm.chat(ASK, { tools: [CALCULATOR], onDelta: (text) => deltas.push(text) });
    const [reasoning] = outputOf("reasoning_call");
    assert.equal(reply.providerState?.origin, modelOrigin(BASE, MODEL));
    assert.deepEqual(reply.providerState?.message, { reasoning: [reasoning] });
    assert.ok(Object.isFrozen(reply.providerState?.message?.reasoning), "kept frozen: it is sent back as is");
    const { providerState: _, ...visible } = reply;
    assert.ok(!JSON.stringify([visible, deltas]).includes(SECRET), "no reasoning in the answer or deltas");

    const asked: Message = { role: "assistant", content: reply.content, toolCalls: reply.toolCalls };
    const result: Message = { role: "tool", content: '{"ok":true,"data":42}', toolCallId: "call_rs1" };
    const answer = await llm.chat([...ASK, { ...asked, providerState: reply.providerState }, result]);
    assert.equal(answer.content, "The capital of France is Paris.");
    assert.deepEqual(fake.refused, []);
    assert.deepEqual((fake.requests[1].input as unknown[]).slice(2), [
      reasoning,
      { type: "function_call", call_id: "call_rs1", name: "calculator", arguments: '{"expression":"6*7"}' },
      { type: "function_call_output", call_id: "call_rs1", output: '{"ok":true,"data":42}' },
    ]);

    // Another model, or another endpoint, gets none of it.
    const history = [...ASK, { ...asked, providerState: reply.providerState }, result];
    await client(fake, stream, { model: "gpt-4.1" }).llm.chat(history);
    await client(fake, stream, { baseUrl: "https://other.test/v1" }).llm.chat(history);
    for (const sent of fake.requests.slice(2)) {
      const types = (sent.input as Record<string, unknown>[]).map((item) => item.type);
      assert.ok(!types.includes("reasoning"), `no reasoning item to another origin: ${types}`);
    }
    assert.deepEqual(fake.refused, []);
  });

  Deno.test(`responses (${mode}): the fake refuses a reasoning item that was changed, and the error names its words but never the key`, async () => {
    const fake = responsesFake([fixture("reasoning_call")], KEY);
    const { llm } = client(fake, stream);
    const reply = await llm.chat(ASK, { tools: [CALCULATOR] });
    const [item] = reply.providerState!.message!.reasoning as Record<string, unknown>[];
    const changed = {
      ...reply.providerState!,
      message: { reasoning: [{ ...item, encrypted_content: "gAAAA-forged" }] },
    };
    const history: Message[] = [
      ...ASK,
      { role: "assistant", content: null, toolCalls: reply.toolCalls, providerState: changed },
      { role: "tool", content: "42", toolCallId: "call_rs1" },
    ];
    const error = await llmError(llm.chat(history));
    assert.equal(error.status, 400);
    assert.match(error.message, /encrypted content for item rs_01 could not be verified/);
    assert.ok(!error.message.includes(KEY));
  });

  Deno.test(`responses (${mode}): cached input tokens are read from input_tokens_details`, async () => {
    const fake = responsesFake([fixture("cached_usage")], KEY);
    const reply = await client(fake, stream).llm.chat(ASK, { cacheKey: "session-s1" });
    assert.deepEqual(reply.usage, {
      promptTokens: 2048,
      completionTokens: 6,
      totalTokens: 2054,
      cachedTokens: 1920,
    });
    const key = fake.requests[0].prompt_cache_key;
    assert.match(String(key), /^[0-9a-f]{16}$/);
    assert.ok(!JSON.stringify(fake.requests[0]).includes("session-s1"), "the raw cache key is never sent");
  });

  Deno.test(`responses (${mode}): a refusal is the content, ending "content_filter"`, async () => {
    const fake = responsesFake([fixture("refusal")], KEY);
    const reply = await client(fake, stream).llm.chat(ASK);
    assert.equal(reply.content, "I'm sorry, I can't help with that.");
    assert.equal(reply.finishReason, "content_filter");
    assert.deepEqual(reply.toolCalls, []);
  });

  Deno.test(`responses (${mode}): a reply cut at max_output_tokens ends "length" with its partial text`, async () => {
    const fake = responsesFake([fixture("max_output_tokens")], KEY);
    const reply = await client(fake, stream, { maxOutputTokens: 16 }).llm.chat(ASK);
    assert.equal(reply.content, "The history of Rome begins");
    assert.equal(reply.finishReason, "length");
    assert.equal(fake.requests[0].max_output_tokens, 16);
  });

  Deno.test(`responses (${mode}): a 429 is retried after its Retry-After, then the answer comes`, async () => {
    const fake = responsesFake([fixture("rate_limited"), fixture("text")], KEY);
    const { llm, delays } = client(fake, stream, { retries: 2 });
    const reply = await llm.chat(ASK);
    assert.equal(reply.content, "The capital of France is Paris.");
    assert.equal(reply.retries, 1);
    assert.deepEqual(delays, [2000]);
    assert.equal(fake.requests.length, 2);
  });

  Deno.test(`responses (${mode}): a refused key is never shown in the error, though the provider quotes it`, async () => {
    const fake = responsesFake([fixture("text")], "sk-the-right-one");
    const error = await llmError(client(fake, stream).llm.chat(ASK));
    assert.equal(error.status, 401);
    assert.match(error.message, /Incorrect API key provided/);
    assert.ok(!error.message.includes(KEY), error.message);
  });

  Deno.test(`responses (${mode}): a turn with a reasoning tool call runs the tool and answers, carrying the reasoning back`, async () => {
    const fake = responsesFake([fixture("reasoning_call"), fixture("reasoning_answer")], KEY);
    using h = harness([]);
    const agent = { ...h.agent, llm: client(fake, stream).llm };
    const deltas: string[] = [];
    const run = { ...h.run, onDelta: (text: string) => deltas.push(text) };
    const first = await runTurn({ sessionId: "s", userId: "u", message: "what is 6*7?" }, agent, run);
    assert.equal(first.outcome, "answered", JSON.stringify(first.failure));
    assert.equal(first.answer, "The answer is 42.");
    const second = await runTurn({ sessionId: "s", userId: "u", message: "and again?" }, agent, run);
    assert.equal(second.outcome, "answered", JSON.stringify(second.failure));
    assert.deepEqual(fake.refused, []);
    assert.equal(fake.requests.length, 3);

    const [rs01] = outputOf("reasoning_call");
    const [rs02] = outputOf("reasoning_answer");
    const input = (n: number) => fake.requests[n].input as Record<string, unknown>[];
    const types = input(1).map((item) => item.type ?? item.role);
    const at = types.indexOf("reasoning");
    assert.deepEqual(types.slice(at), ["reasoning", "function_call", "function_call_output"]);
    assert.deepEqual(input(1)[at], rs01);
    assert.match(String(input(1).at(-1)!.output), /42/);
    const carried = input(2).filter((item) => item.type === "reasoning");
    assert.deepEqual(carried, [rs01, rs02], "the next turn carries both replies' reasoning back");

    const stored = await h.store.messages(keyOf("s"));
    assert.equal(
      stored.filter((message) => message.providerState !== undefined).length,
      3,
      "each reply with reasoning",
    );
    const text = JSON.stringify([stored.map(({ providerState: _, ...rest }) => rest), h.events, deltas]);
    assert.ok(!text.includes(SECRET), "no reasoning in the stored text, the events or the deltas");
  });
}

Deno.test("responses: the body is the same bytes for the same input, with effort, output limit, format and a hashed cache key", () => {
  const options: BodyOptions = {
    ...BODY_OPTIONS,
    stream: true,
    reasoningEffort: "high",
    maxOutputTokens: 500,
    cacheKey: "user-u:session-s",
    responseFormat: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true },
  };
  const body = OPENAI_RESPONSES.body(ASK, [CALCULATOR], options);
  assert.equal(OPENAI_RESPONSES.body(ASK, [CALCULATOR], { ...options }), body);
  const parsed = JSON.parse(body);
  assert.deepEqual(parsed.reasoning, { effort: "high" });
  assert.equal(parsed.max_output_tokens, 500);
  assert.deepEqual(parsed.text, {
    format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true },
  });
  assert.match(parsed.prompt_cache_key, /^[0-9a-f]{16}$/);
  assert.ok(!body.includes("session-s"));
  const other = JSON.parse(OPENAI_RESPONSES.body(ASK, [], { ...options, cacheKey: "user-u:session-t" }));
  assert.notEqual(other.prompt_cache_key, parsed.prompt_cache_key);
  const json = JSON.parse(
    OPENAI_RESPONSES.body(ASK, [], { ...BODY_OPTIONS, responseFormat: { type: "json_object" } }),
  );
  assert.deepEqual(json.text, { format: { type: "json_object" } });
  assert.equal(OPENAI_RESPONSES.path, "/responses");
  assert.deepEqual(OPENAI_RESPONSES.auth("k"), { Authorization: "Bearer k" });
});

Deno.test("responses: runtime messages go as user, an assistant's text before its calls, and malformed messages throw TypeError", () => {
  const messages: Message[] = [
    { role: "runtime", content: "[runtime] go on" },
    {
      role: "assistant",
      content: "Let me compute.",
      toolCalls: [{ id: "c1", name: "calculator", arguments: "{}" }],
    },
  ];
  const input = JSON.parse(OPENAI_RESPONSES.body(messages, [], BODY_OPTIONS)).input;
  assert.deepEqual(input, [
    { role: "user", content: "[runtime] go on" },
    { role: "assistant", content: "Let me compute." },
    { type: "function_call", call_id: "c1", name: "calculator", arguments: "{}" },
  ]);
  assert.throws(
    () => OPENAI_RESPONSES.body([{ role: "tool", content: "1" }], [], BODY_OPTIONS),
    new TypeError("Cannot build request: tool message 0 has no toolCallId"),
  );
  const odd = { role: "robot", content: "?" } as unknown as Message;
  assert.throws(() => OPENAI_RESPONSES.body([odd], [], BODY_OPTIONS), TypeError);
});

Deno.test("responses: the fake refuses a function_call_output without its call, store not false, and reasoning without include", async () => {
  const fake = responsesFake([fixture("reasoning_call")], KEY);
  const { llm } = client(fake, false);
  const orphan = await llmError(llm.chat([...ASK, { role: "tool", content: "1", toolCallId: "call_x" }]));
  assert.equal(orphan.status, 400);
  assert.match(orphan.message, /No tool call found for function call output with call_id call_x/);

  await llm.chat(ASK);
  const [reasoning] = outputOf("reasoning_call");
  const post = (body: Record<string, unknown>) =>
    fake.fetch(`${BASE}/responses`, {
      method: "POST",
      headers: { Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: MODEL, input: [], store: false, ...body }),
    });
  const stored = await post({ store: true });
  assert.equal(stored.status, 400);
  assert.equal((await stored.json()).error.param, "store");
  const noInclude = await post({ input: [reasoning] });
  assert.equal(noInclude.status, 400);
  assert.equal((await noInclude.json()).error.type, "invalid_request_error");
  const ok = await post({ input: [reasoning], include: ["reasoning.encrypted_content"] });
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
});

Deno.test("responses (streamed): a rate-limit error event before any text is retried like a 429", async () => {
  const failed: FakeReply = {
    events: [
      { type: "response.created", response: { id: "resp_f", status: "in_progress", output: [] } },
      {
        type: "response.failed",
        response: {
          id: "resp_f",
          status: "failed",
          error: { code: "rate_limit_exceeded", message: "Slow down" },
        },
      },
    ],
  };
  const fake = responsesFake([failed, fixture("text")], KEY);
  const reply = await client(fake, true, { retries: 1 }).llm.chat(ASK);
  assert.equal(reply.content, "The capital of France is Paris.");
  assert.equal(reply.retries, 1);
});

Deno.test("responses (streamed): an error event of another code fails as invalid_response naming the provider's words", async () => {
  const event = { type: "error", code: "invalid_prompt", message: "Your prompt was flagged", param: null };
  const fake = responsesFake([{ events: [event] }], KEY);
  const error = await llmError(client(fake, true, { retries: 2 }).llm.chat(ASK));
  assert.equal(error.kind, "invalid_response");
  assert.match(error.message, /Your prompt was flagged/);
  assert.equal(fake.requests.length, 1);
});

Deno.test("responses (streamed): a stream that stops before response.completed fails, saying so", async () => {
  const fake = responsesFake([{
    events: [{ type: "response.output_text.delta", output_index: 0, delta: "Hal" }],
  }], KEY);
  const error = await llmError(client(fake, true).llm.chat(ASK));
  assert.equal(error.kind, "invalid_response");
  assert.match(error.message, /without response\.completed/);
});

Deno.test("responses (whole): a failed response and a body without output fail as invalid_response with the provider's words", async () => {
  const failed = {
    id: "resp_x",
    status: "failed",
    error: { code: "server_error", message: "The model crashed" },
  };
  const error = await llmError(
    client(responsesFake([{ status: 200, body: failed }], KEY), false).llm.chat(ASK),
  );
  assert.equal(error.kind, "invalid_response");
  assert.match(error.message, /The model crashed/);
  const bare = { status: 200, body: { error: { message: "gateway says no" } } };
  const missing = await llmError(client(responsesFake([bare], KEY), false).llm.chat(ASK));
  assert.equal(missing.kind, "invalid_response");
  assert.match(missing.message, /"output" is missing.*gateway says no/);
});

Deno.test("responses (whole): a function call without a name is kept with its problem, as invalid_tool_call", async () => {
  const response = {
    id: "r",
    status: "completed",
    output: [{ type: "function_call", call_id: "c", arguments: "{}" }],
  };
  const reply = await client(responsesFake([{ response }], KEY), false).llm.chat(ASK);
  assert.equal(reply.toolCalls[0].name, "invalid_tool_call");
  assert.match(reply.toolCalls[0].problem ?? "", /no function name/);
});

Deno.test("responses: an LlmError of the client is what a failure rejects with", async () => {
  const fake = responsesFake([{
    status: 400,
    body: { error: { message: "bad", type: "invalid_request_error" } },
  }], KEY);
  const error = await client(fake, false).llm.chat(ASK).catch((e) => e);
  assert.ok(error instanceof LlmError);
});

Deno.test("every wire format offers the tools but forbids calling them with toolChoice none, and says nothing without tools or with auto", () => {
  const tools: ToolSchema[] = [{ name: "calculator", description: "d", parameters: { type: "object" } }];
  const choiceOf = (dialect: Dialect, options: Partial<BodyOptions>, offered = tools) =>
    JSON.parse(dialect.body(ASK, offered, { ...BODY_OPTIONS, ...options })).tool_choice;
  const none = { toolChoice: "none" as const };
  assert.equal(choiceOf(CHAT_COMPLETIONS, none), "none");
  assert.equal(choiceOf(OPENAI_RESPONSES, none), "none");
  // With thinking on, Messages takes auto or none: none stays allowed.
  assert.deepEqual(choiceOf(ANTHROPIC_MESSAGES, { ...none, thinkingBudget: 2048 }), { type: "none" });
  assert.deepEqual(
    choiceOf(ANTHROPIC_MESSAGES, { ...none, responseFormat: { type: "json_object" } }),
    { type: "none" },
    "no forced answer tool in a request that may call no tool",
  );
  for (const dialect of [CHAT_COMPLETIONS, OPENAI_RESPONSES, ANTHROPIC_MESSAGES]) {
    assert.equal(choiceOf(dialect, none, []), undefined, "no tools, no tool_choice");
    assert.equal(choiceOf(dialect, {}), undefined, "auto is every API's default");
  }
});
