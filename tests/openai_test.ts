import { Ajv2020 } from "./_dev_deps.ts";
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import {
  buildRequestBody,
  HttpLLM,
  type HttpLLMOptions,
  parseCompletion,
  type RetryInfo,
} from "../src/llm/client.ts";
import type { ChatReply, Message, ResponseFormat, ToolSchema } from "../src/types.ts";
import {
  BASE,
  HELLO,
  KEY,
  llmError,
  makeClient,
  MODEL,
  OPENAPI,
  recordingSleep,
  respond,
  type Step,
  stubFetch,
  WIRE,
} from "./_openai_stubs.ts";

// ---------------------------------------------------------------------------------------------------------
// Stubs

/** Never answers: rejects only when the client aborts (its timeout or the caller's signal). */
function hang(): Step {
  return (signal) =>
    new Promise((_, reject) => {
      if (signal.aborted) return reject(signal.reason);
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
}

function throwing(error: unknown): Step {
  return () => Promise.reject(error);
}

function completion(message: Record<string, unknown>, extra: Record<string, unknown> = {}): unknown {
  return {
    id: "chatcmpl-test",
    object: "chat.completion",
    model: "served-model",
    choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    ...extra,
  };
}

const OK: Step = respond(200, completion({ content: "ok" }));

/** Every place the key could hide in an error: message, stack, inspection (which includes the cause). */
function assertNoKey(error: Error): void {
  for (const text of [error.message, String(error), error.stack ?? "", Deno.inspect(error, { depth: 10 })]) {
    assert.ok(!text.includes(KEY), `the API key leaked: ${text}`);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Recorded wire data

interface WireFixture {
  http_body: Record<string, unknown>;
  http_body_raw: string;
}

const FIXTURE_NAMES = [...Deno.readDirSync(WIRE)]
  .map((entry) => entry.name)
  .filter((name) => name.endsWith(".nonstream.json"))
  .sort();

function readFixture(name: string): WireFixture {
  return JSON.parse(Deno.readTextFileSync(new URL(name, WIRE)));
}

/** The reply the contract promises for a body, derived from the parsed `http_body`, not from the raw text. */
// deno-lint-ignore no-explicit-any
function expectedReply(body: any): ChatReply {
  const message = body.choices[0].message;
  // deno-lint-ignore no-explicit-any
  const toolCalls = (message.tool_calls ?? []).map((call: any) => ({
    id: call.id,
    name: call.function.name,
    arguments: call.function.arguments,
  }));
  return {
    content: message.content === "" && toolCalls.length > 0 ? null : message.content,
    toolCalls,
    usage: {
      promptTokens: body.usage.prompt_tokens,
      completionTokens: body.usage.completion_tokens,
      totalTokens: body.usage.total_tokens,
      cachedTokens: body.usage.prompt_tokens_details?.cached_tokens ?? null,
    },
    model: body.model,
    finishReason: body.choices[0].finish_reason ?? null,
  };
}

/** Hand-read expectations, so a mistake shared by the client and `expectedReply` still fails. */
const SPOT_CHECKS: Record<string, Partial<ChatReply>> = {
  "deepseek-reasoning.nonstream.json": {
    toolCalls: [],
    usage: { promptTokens: 18, completionTokens: 345, totalTokens: 363, cachedTokens: 0 },
    model: "deepseek-reasoner",
    finishReason: "stop",
  },
  "deepseek-text.nonstream.json": {
    toolCalls: [],
    usage: { promptTokens: 13, completionTokens: 300, totalTokens: 313, cachedTokens: 0 },
    model: "deepseek-chat",
    finishReason: "length",
  },
  "deepseek-toolcall-reasoning.nonstream.json": {
    content: null,
    toolCalls: [{
      id: "call_00_9V0vrf86Pc9aelHCJMZqnJBo",
      name: "weather",
      arguments: '{"location": "San Francisco"}',
    }],
    usage: { promptTokens: 339, completionTokens: 92, totalTokens: 431, cachedTokens: 320 },
    model: "deepseek-reasoner",
    finishReason: "tool_calls",
  },
  "openai-gpt4o-toolcall-strict.nonstream.json": {
    content: null,
    toolCalls: [{
      id: "call_CUdUoJpsWWVdxXntucvnol1M",
      name: "get_weather",
      arguments: '{"city":"San Francisco","state":"CA"}',
    }],
    usage: { promptTokens: 48, completionTokens: 19, totalTokens: 67, cachedTokens: null },
    model: "gpt-4o-2024-08-06",
    finishReason: "tool_calls",
  },
  "openai-gpt4o-toolcalls-parallel.nonstream.json": {
    content: null,
    toolCalls: [
      {
        id: "call_fdNz3vOBKYgOIpMdWotB9MjY",
        name: "GetWeatherArgs",
        arguments: '{"city": "Edinburgh", "country": "GB", "units": "c"}',
      },
      {
        id: "call_h1DWI1POMJLb0KwIyQHWXD4p",
        name: "get_stock_price",
        arguments: '{"ticker": "AAPL", "exchange": "NASDAQ"}',
      },
    ],
    usage: { promptTokens: 149, completionTokens: 60, totalTokens: 209, cachedTokens: null },
    model: "gpt-4o-2024-08-06",
    finishReason: "tool_calls",
  },
};

function assertReplyMatches(
  reply: ChatReply,
  body: Record<string, unknown>,
  spot?: Partial<ChatReply>,
): void {
  const { providerState, ...seen } = reply;
  assert.deepEqual(seen, expectedReply(body));
  for (const [field, value] of Object.entries(spot ?? {})) {
    assert.deepEqual(reply[field as keyof ChatReply], value, `reply.${field}`);
  }
  const serialized = JSON.stringify(seen);
  assert.ok(!serialized.includes("reasoning"), "no reasoning field in the reply");
  // deno-lint-ignore no-explicit-any
  const reasoning = (body as any).choices[0].message.reasoning_content;
  if (typeof reasoning === "string") {
    assert.ok(!serialized.includes(reasoning.slice(0, 40)), "reasoning_content is only provider state");
    assert.equal(providerState?.message?.reasoning_content, reasoning, "kept exactly as received");
  } else assert.equal(providerState, undefined);
}

Deno.test("the wire fixture folder holds the recorded non-streaming bodies", () => {
  assert.ok(FIXTURE_NAMES.length >= 5, `found ${FIXTURE_NAMES.join(", ")}`);
  for (const name of Object.keys(SPOT_CHECKS)) assert.ok(FIXTURE_NAMES.includes(name), name);
});

for (const name of FIXTURE_NAMES) {
  Deno.test(`HttpLLM.chat() reads the recorded body ${name}`, async () => {
    const fixture = readFixture(name);
    assert.deepEqual(JSON.parse(fixture.http_body_raw), fixture.http_body, "raw and parsed fixture agree");
    const { fetch, sent } = stubFetch(respond(200, fixture.http_body_raw));
    const { llm } = makeClient(fetch);
    const reply = await llm.chat(HELLO);
    assert.equal(sent.length, 1);
    assertReplyMatches(reply, fixture.http_body, SPOT_CHECKS[name]);
  });
}

Deno.test("HttpLLM.chat() reads a recorded body from a real loopback server", async () => {
  const fixture = readFixture("deepseek-toolcall-reasoning.nonstream.json");
  const received: { path: string; auth: string | null; type: string | null; body: unknown }[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    received.push({
      path: new URL(request.url).pathname,
      auth: request.headers.get("authorization"),
      type: request.headers.get("content-type"),
      body: await request.json(),
    });
    return new Response(fixture.http_body_raw, { headers: { "content-type": "application/json" } });
  });
  try {
    const llm = new HttpLLM({
      baseUrl: `http://127.0.0.1:${server.addr.port}/v1`,
      apiKey: KEY,
      model: "deepseek-reasoner",
    });
    const reply = await llm.chat(HELLO);
    assertReplyMatches(reply, fixture.http_body, SPOT_CHECKS["deepseek-toolcall-reasoning.nonstream.json"]);
    assert.deepEqual(received, [{
      path: "/v1/chat/completions",
      auth: `Bearer ${KEY}`,
      type: "application/json",
      body: { model: "deepseek-reasoner", messages: [{ role: "user", content: "hello" }] },
    }]);
  } finally {
    await server.shutdown();
  }
});

Deno.test("HttpLLM.chat() names a loopback URL that refuses connections and does not retry it", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => new Response("x"));
  const port = server.addr.port;
  await server.shutdown();
  const { sleep, delays } = recordingSleep();
  const llm = new HttpLLM({
    baseUrl: `http://127.0.0.1:${port}/v1`,
    apiKey: KEY,
    model: MODEL,
    retries: 1,
    sleep,
  });
  const error = await llmError(llm.chat(HELLO));
  assert.equal(error.kind, "network");
  assert.equal(error.retries, 0);
  assert.deepEqual(delays, []);
  assert.equal(error.message, `cannot connect to http://127.0.0.1:${port}: connection refused`);
});

const DOC_EXAMPLES = JSON.parse(Deno.readTextFileSync(new URL("openai-spec-doc-examples.json", WIRE)))
  .examples as Record<string, { request_curl: string; response_raw: string }>;

/** The examples whose response is one JSON completion (the streaming one is a sketch of chunks with "...."). */
function docCompletions(): [string, Record<string, unknown>, string][] {
  const found: [string, Record<string, unknown>, string][] = [];
  for (const [name, example] of Object.entries(DOC_EXAMPLES)) {
    try {
      const body = JSON.parse(example.response_raw);
      if (body.object === "chat.completion") found.push([name, body, example.response_raw]);
    } catch {
      // Not one JSON document: the streaming example.
    }
  }
  return found;
}

Deno.test("the OpenAI documentation has two non-streaming response examples", () => {
  assert.deepEqual(docCompletions().map(([name]) => name), ["Default", "Functions"]);
});

for (const [name, body, raw] of docCompletions()) {
  Deno.test(`HttpLLM.chat() reads the OpenAI documentation example "${name}"`, async () => {
    const { fetch } = stubFetch(respond(200, raw));
    const reply = await makeClient(fetch).llm.chat(HELLO);
    const spot: Partial<ChatReply> = name === "Default"
      ? {
        content: "Hello! How can I assist you today?",
        toolCalls: [],
        model: "gpt-5.4",
        finishReason: "stop",
      }
      : {
        content: null,
        toolCalls: [{
          id: "call_abc123",
          name: "get_current_weather",
          arguments: '{\n"location": "Boston, MA"\n}',
        }],
        usage: { promptTokens: 82, completionTokens: 17, totalTokens: 99, cachedTokens: null },
        finishReason: "tool_calls",
      };
    assertReplyMatches(reply, body, spot);
  });
}

// ---------------------------------------------------------------------------------------------------------
// Request bodies against OpenAI's schema

const OPENAPI_ID = "chat-completions.openapi.json";
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(JSON.parse(Deno.readTextFileSync(OPENAPI)), OPENAPI_ID);
const validateRequest = ajv.getSchema(`${OPENAPI_ID}#/components/schemas/CreateChatCompletionRequest`)!;

function assertValidRequest(body: unknown): void {
  const valid = validateRequest(body);
  assert.ok(
    valid,
    `request body rejected: ${ajv.errorsText(validateRequest.errors)}\n${JSON.stringify(body)}`,
  );
}

const TOOLS: ToolSchema[] = [
  {
    name: "calculator",
    description: "Evaluates an arithmetic expression.",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  },
  {
    name: "search",
    description: "Searches the corpus.",
    parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
  },
];

const CONVERSATION: Message[] = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "What is 2+3, and find docs on sqlite?" },
  {
    role: "assistant",
    content: null,
    toolCalls: [
      { id: "call_1", name: "calculator", arguments: '{"expression":"2+3"}' },
      { id: "call_2", name: "search", arguments: '{"query":"sqlite"}' },
    ],
  },
  { role: "tool", toolCallId: "call_1", content: '{"ok":true,"data":5,"error":null,"truncated":false}' },
  { role: "tool", toolCallId: "call_2", content: '{"ok":true,"data":[],"error":null,"truncated":false}' },
  { role: "assistant", content: "" },
  { role: "runtime", content: "[runtime] Your last reply was empty. Answer the user." },
];

async function sentBody(messages: Message[], tools: ToolSchema[] = []): Promise<unknown> {
  const { fetch, sent } = stubFetch(OK);
  await makeClient(fetch).llm.chat(messages, { tools });
  assert.equal(sent.length, 1);
  return sent[0].body;
}

Deno.test("the schema validator accepts the request of OpenAI's own function-calling example", () => {
  const curl = DOC_EXAMPLES.Functions.request_curl;
  const body = JSON.parse(curl.slice(curl.indexOf("-d '") + 4, curl.lastIndexOf("'")));
  assertValidRequest(body);
});

Deno.test("the schema validator rejects malformed request bodies", () => {
  const good = buildRequestBody(MODEL, HELLO, []);
  assertValidRequest(good);
  const bad: [string, unknown][] = [
    ["tool message without tool_call_id", { model: MODEL, messages: [{ role: "tool", content: "5" }] }],
    ["messages not an array", { model: MODEL, messages: "hello" }],
    ["no messages", { model: MODEL, messages: [] }],
    ["the runtime role sent as is", {
      model: MODEL,
      messages: [{ role: "runtime", content: "[runtime] x" }],
    }],
    ["a tool without its function", { ...good, tools: [{ type: "function" }] }],
    ["no model", { messages: good.messages }],
  ];
  for (const [what, body] of bad) assert.equal(validateRequest(body), false, what);
});

Deno.test("HttpLLM.chat() sends a schema-valid body with tools", async () => {
  const body = await sentBody(CONVERSATION.slice(0, 2), TOOLS);
  assertValidRequest(body);
  assert.deepEqual(body, {
    model: MODEL,
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "What is 2+3, and find docs on sqlite?" },
    ],
    tools: TOOLS.map((tool) => ({ type: "function", function: tool })),
  });
});

Deno.test("HttpLLM.chat() sends assistant tool calls, tool results and a runtime nudge validly", async () => {
  const body = await sentBody(CONVERSATION, TOOLS);
  assertValidRequest(body);
  // deno-lint-ignore no-explicit-any
  assert.deepEqual((body as any).messages.slice(2), [
    {
      role: "assistant",
      content: null,
      tool_calls: [
        {
          id: "call_1",
          type: "function",
          function: { name: "calculator", arguments: '{"expression":"2+3"}' },
        },
        { id: "call_2", type: "function", function: { name: "search", arguments: '{"query":"sqlite"}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: '{"ok":true,"data":5,"error":null,"truncated":false}' },
    { role: "tool", tool_call_id: "call_2", content: '{"ok":true,"data":[],"error":null,"truncated":false}' },
    { role: "assistant", content: "" },
    { role: "user", content: "[runtime] Your last reply was empty. Answer the user." },
  ]);
});

Deno.test("HttpLLM.chat() sends exactly what buildRequestBody() builds, without tools when none", async () => {
  const body = await sentBody(CONVERSATION);
  assertValidRequest(body);
  assert.deepEqual(body, buildRequestBody(MODEL, CONVERSATION, []));
  assert.ok(!Object.hasOwn(body as object, "tools"), "no empty tools array");
});

Deno.test("HttpLLM.chat() sends a response_format OpenAI's schema accepts: json_schema and json_object", async () => {
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
  const formats: [ResponseFormat, unknown][] = [
    [
      { type: "json_schema", name: "answer", schema, strict: true, description: "a number" },
      { type: "json_schema", json_schema: { name: "answer", description: "a number", schema, strict: true } },
    ],
    [{ type: "json_schema", name: "answer", schema }, {
      type: "json_schema",
      json_schema: { name: "answer", schema },
    }],
    [{ type: "json_object" }, { type: "json_object" }],
  ];
  for (const [responseFormat, wire] of formats) {
    const { fetch, sent } = stubFetch(OK);
    await makeClient(fetch).llm.chat(HELLO, { tools: TOOLS, responseFormat });
    const body = sent[0].body as Record<string, unknown>;
    assertValidRequest(body);
    assert.deepEqual(body.response_format, wire);
    assert.deepEqual(body, buildRequestBody(MODEL, HELLO, TOOLS, { responseFormat }));
  }
  const { fetch, sent } = stubFetch(OK);
  await makeClient(fetch).llm.chat(HELLO, { responseFormat: null });
  assert.ok(!Object.hasOwn(sent[0].body as object, "response_format"), "none without a format");
});

Deno.test("HttpLLM.chat() sends reasoning_effort when one is set, and no such field otherwise", async () => {
  for (const reasoningEffort of ["low", "medium", "high"] as const) {
    const { fetch, sent } = stubFetch(OK);
    const responseFormat: ResponseFormat = { type: "json_object" };
    await makeClient(fetch, { reasoningEffort }).llm.chat(HELLO, { tools: TOOLS, responseFormat });
    const body = sent[0].body;
    assertValidRequest(body);
    assert.equal(body.reasoning_effort, reasoningEffort);
    assert.deepEqual(Object.keys(body).slice(-2), ["response_format", "reasoning_effort"]);
    assert.deepEqual(body, buildRequestBody(MODEL, HELLO, TOOLS, { responseFormat, reasoningEffort }));
  }
  for (const options of [{}, { reasoningEffort: null }]) {
    const { fetch, sent } = stubFetch(OK);
    await makeClient(fetch, options).llm.chat(HELLO);
    assert.deepEqual(sent[0].body, { model: MODEL, messages: [{ role: "user", content: "hello" }] });
  }
  // The validator does look at the field.
  assert.equal(validateRequest({ ...buildRequestBody(MODEL, HELLO), reasoning_effort: "hard" }), false);
});

Deno.test("the schema validator rejects a response_format OpenAI would refuse", () => {
  const good = buildRequestBody(MODEL, HELLO, [], { responseFormat: { type: "json_object" } });
  assertValidRequest(good);
  const bad: [string, unknown][] = [
    ["json_schema without its name", { type: "json_schema", json_schema: { schema: { type: "object" } } }],
    ["json_schema without json_schema", { type: "json_schema" }],
    ["an unknown type", { type: "xml" }],
  ];
  for (const [what, format] of bad) {
    assert.equal(validateRequest({ ...good, response_format: format }), false, what);
  }
});

Deno.test("buildRequestBody() never sends an empty tool_calls array and nulls the text of a pure call", () => {
  const body = buildRequestBody(MODEL, [
    { role: "user", content: "hi" },
    { role: "assistant", content: "thinking", toolCalls: [] },
    { role: "assistant", content: "", toolCalls: [{ id: "c", name: "search", arguments: "{}" }] },
  ]);
  assert.deepEqual(body.messages.slice(1), [
    { role: "assistant", content: "thinking" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "c", type: "function", function: { name: "search", arguments: "{}" } }],
    },
  ]);
  assertValidRequest(body);
});

Deno.test("buildRequestBody() keeps the text beside tool calls and sends null texts as empty strings", () => {
  const body = buildRequestBody(MODEL, [
    { role: "user", content: null },
    {
      role: "assistant",
      content: "Let me check.",
      toolCalls: [{ id: "c", name: "search", arguments: "{}" }],
    },
    { role: "tool", toolCallId: "c", content: null },
  ]);
  assert.deepEqual(body.messages, [
    { role: "user", content: "" },
    {
      role: "assistant",
      content: "Let me check.",
      tool_calls: [{ id: "c", type: "function", function: { name: "search", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "c", content: "" },
  ]);
  assertValidRequest(body);
});

Deno.test("buildRequestBody() rejects a tool message without toolCallId with a TypeError", () => {
  assert.throws(
    () => buildRequestBody(MODEL, [{ role: "tool", content: "5" }]),
    { name: "TypeError", message: "Cannot build request: tool message 0 has no toolCallId" },
  );
});

// ---------------------------------------------------------------------------------------------------------
// HTTP details

Deno.test("HttpLLM.chat() POSTs JSON to {baseUrl}/chat/completions with the bearer key", async () => {
  const { fetch, sent } = stubFetch(OK);
  await makeClient(fetch).llm.chat(HELLO);
  assert.equal(sent[0].url, "https://api.example.com/v1/chat/completions");
  assert.equal(sent[0].method, "POST");
  assert.equal(sent[0].headers.get("content-type"), "application/json");
  assert.equal(sent[0].headers.get("authorization"), `Bearer ${KEY}`);
});

Deno.test("HttpLLM.chat() sends no Authorization header when the key is empty", async () => {
  const { fetch, sent } = stubFetch(OK);
  await makeClient(fetch, { apiKey: "", baseUrl: "http://127.0.0.1:8080/v1/" }).llm.chat(HELLO);
  assert.equal(sent[0].url, "http://127.0.0.1:8080/v1/chat/completions", "a trailing slash is dropped");
  assert.equal(sent[0].headers.has("authorization"), false);
});

Deno.test("HttpLLM.chat() falls back to the configured model when the body names none", async () => {
  const body = completion({ content: "hi" }) as Record<string, unknown>;
  delete body.model;
  delete body.usage;
  const { fetch } = stubFetch(respond(200, body));
  const reply = await makeClient(fetch).llm.chat(HELLO);
  assert.deepEqual(reply, { content: "hi", toolCalls: [], usage: null, model: MODEL, finishReason: "stop" });
});

// ---------------------------------------------------------------------------------------------------------
// Retries

Deno.test("HttpLLM.chat() retries a timed-out attempt and returns the next reply", async () => {
  const { fetch, sent } = stubFetch(hang(), OK);
  const { llm, delays } = makeClient(fetch, { timeoutSeconds: 0.05 });
  const reply = await llm.chat(HELLO);
  assert.equal(reply.content, "ok");
  assert.equal(sent.length, 2);
  assert.equal(sent[0].signal.aborted, true, "the first attempt was cut off");
  assert.deepEqual(delays, [500]);
});

Deno.test("HttpLLM.chat() fails with kind timeout after every attempt timed out", async () => {
  const { fetch, sent } = stubFetch(hang());
  const { llm, delays } = makeClient(fetch, { timeoutSeconds: 0.05, retries: 1 });
  const error = await llmError(llm.chat(HELLO));
  assert.equal(error.kind, "timeout");
  assert.equal(error.retries, 1);
  assert.equal(error.status, null);
  assert.equal(error.message, "LLM request timed out after 0.05 s (2 attempts)");
  assert.equal(sent.length, 2);
  assert.deepEqual(delays, [500]);
});

Deno.test("HttpLLM.chat() waits the Retry-After seconds of a 429", async () => {
  const { fetch, sent } = stubFetch(
    respond(429, { error: { message: "Rate limit" } }, { "Retry-After": "2" }),
    OK,
  );
  const { llm, delays } = makeClient(fetch);
  assert.equal((await llm.chat(HELLO)).content, "ok");
  assert.deepEqual(delays, [2000]);
  assert.equal(sent.length, 2);
});

Deno.test("HttpLLM.chat() measures an HTTP-date Retry-After against the injected clock", async () => {
  const now = () => Date.parse("Wed, 21 Oct 2015 07:28:00 GMT");
  const { fetch } = stubFetch(respond(503, "busy", { "Retry-After": "Wed, 21 Oct 2015 07:28:03 GMT" }), OK);
  const { llm, delays } = makeClient(fetch, { now });
  assert.equal((await llm.chat(HELLO)).content, "ok");
  assert.deepEqual(delays, [3000]);
});

Deno.test("HttpLLM.chat() retries at once when the Retry-After date has passed", async () => {
  const now = () => Date.parse("Wed, 21 Oct 2015 08:00:00 GMT");
  const { fetch } = stubFetch(
    respond(429, "slow down", { "Retry-After": "Wed, 21 Oct 2015 07:28:03 GMT" }),
    OK,
  );
  const { llm, delays } = makeClient(fetch, { now });
  await llm.chat(HELLO);
  assert.deepEqual(delays, [0]);
});

Deno.test("HttpLLM.chat() caps a Retry-After of 120 s at 60 s", async () => {
  const { fetch } = stubFetch(respond(429, "slow down", { "Retry-After": "120" }), OK);
  const { llm, delays } = makeClient(fetch);
  await llm.chat(HELLO);
  assert.deepEqual(delays, [60_000]);
});

Deno.test("HttpLLM.chat() falls back to backoff when Retry-After is unreadable", async () => {
  const { fetch } = stubFetch(respond(429, "slow down", { "Retry-After": "soon" }), OK);
  const { llm, delays } = makeClient(fetch);
  await llm.chat(HELLO);
  assert.deepEqual(delays, [500]);
});

Deno.test("HttpLLM.chat() returns the reply after a 500", async () => {
  const { fetch, sent } = stubFetch(respond(500, { error: { message: "boom" } }), OK);
  const { llm, delays } = makeClient(fetch);
  assert.equal((await llm.chat(HELLO)).content, "ok");
  assert.equal(sent.length, 2);
  assert.deepEqual(delays, [500]);
});

Deno.test("HttpLLM.chat() backs off 0.5 s then 1 s through a 502 and a 503", async () => {
  const { fetch, sent } = stubFetch(respond(502, "<html>Bad Gateway</html>"), respond(503, ""), OK);
  const { llm, delays } = makeClient(fetch);
  assert.equal((await llm.chat(HELLO)).content, "ok");
  assert.equal(sent.length, 3);
  assert.deepEqual(delays, [500, 1000]);
});

for (const status of [408, 409, 429, 500, 504, 599]) {
  Deno.test(`HttpLLM.chat() retries HTTP ${status}`, async () => {
    const { fetch, sent } = stubFetch(respond(status, "try again"), OK);
    const { llm, delays } = makeClient(fetch);
    await llm.chat(HELLO);
    assert.equal(sent.length, 2);
    assert.deepEqual(delays, [500]);
  });
}

for (const status of [400, 401, 403, 404, 422]) {
  Deno.test(`HttpLLM.chat() does not retry HTTP ${status}`, async () => {
    const { fetch, sent } = stubFetch(respond(status, { error: { message: `provider says ${status}` } }), OK);
    const { llm, delays } = makeClient(fetch);
    const error = await llmError(llm.chat(HELLO));
    assert.equal(error.kind, "http");
    assert.equal(error.status, status);
    assert.equal(error.retries, 0);
    assert.equal(
      error.message,
      `LLM request failed: HTTP ${status} from api.example.com: provider says ${status}`,
    );
    assert.equal(sent.length, 1);
    assert.deepEqual(delays, []);
  });
}

Deno.test("HttpLLM.chat() says once, without retry, to unset AGENT_REASONING_EFFORT when the provider rejects reasoning_effort", async () => {
  const cases: [string, unknown, string][] = [
    [
      "OpenAI, an argument it does not know",
      {
        error: {
          message: "Unrecognized request argument supplied: reasoning_effort",
          type: "invalid_request_error",
          param: "reasoning_effort",
        },
      },
      "Unrecognized request argument supplied: reasoning_effort",
    ],
    [
      "OpenAI, a model without reasoning",
      {
        error: {
          message: "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
          type: "invalid_request_error",
          param: "reasoning_effort",
          code: "unsupported_parameter",
        },
      },
      "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
    ],
    [
      "a provider that names the field in param alone",
      { error: { message: "Invalid request", type: "invalid_request_error", param: "reasoning_effort" } },
      "Invalid request",
    ],
    [
      "xAI, in its own spelling",
      {
        code: "Client specified an invalid argument",
        error: "Model grok-4-latest does not support parameter reasoningEffort.",
      },
      "Model grok-4-latest does not support parameter reasoningEffort.",
    ],
  ];
  for (const stream of [false, true]) {
    for (const [provider, refusal, said] of cases) {
      const what = `${provider}${stream ? ", streamed" : ""}`;
      const { fetch, sent } = stubFetch((signal) =>
        Object.hasOwn(sent.at(-1)!.body, "reasoning_effort")
          ? respond(400, refusal, { "content-type": "application/json" })(signal)
          : respond(200, completion({ content: "ok" }), { "content-type": "application/json" })(signal)
      );
      const { llm, delays } = makeClient(fetch, { reasoningEffort: "high", stream, retries: 2 });
      const error = await llmError(llm.chat(HELLO));
      assert.equal(error.kind, "http", what);
      assert.equal(error.status, 400, what);
      assert.equal(error.retries, 0, what);
      assert.equal(
        error.message,
        `LLM request failed: HTTP 400 from api.example.com: ${said} (the provider rejected ` +
          'reasoning_effort "high": unset AGENT_REASONING_EFFORT for this model)',
        what,
      );
      assert.equal(sent.length, 1, what);
      assert.deepEqual(delays, [], what);
      // The same provider answers the same request without the field.
      const reply = await makeClient(fetch, { stream }).llm.chat(HELLO);
      assert.equal(reply.content, "ok", what);
      assert.equal(Object.hasOwn(sent[1].body, "reasoning_effort"), false, what);
    }
  }
});

Deno.test("HttpLLM.chat() names AGENT_REASONING_EFFORT only for a 400 about reasoning_effort to a request that sent it", async () => {
  const aboutEffort = { error: { message: "Unrecognized request argument supplied: reasoning_effort" } };
  const cases: [string, number, unknown, Partial<HttpLLMOptions>][] = [
    ["no effort was sent", 400, aboutEffort, {}],
    ["another field was refused", 400, { error: { message: "Unrecognized argument: foo" } }, {
      reasoningEffort: "low",
    }],
    ["a 404 quoting the request", 404, aboutEffort, { reasoningEffort: "low" }],
  ];
  for (const [what, status, body, options] of cases) {
    const { fetch } = stubFetch(respond(status, body));
    const error = await llmError(makeClient(fetch, options).llm.chat(HELLO));
    assert.equal(error.status, status, what);
    assert.doesNotMatch(error.message, /AGENT_REASONING_EFFORT/, what);
  }
});

Deno.test("HttpLLM.chat() reports a 401 with the provider's message and without the key", async () => {
  const providerMessage = `Incorrect API key provided: ${KEY}. You can find your API key at ` +
    "https://platform.openai.com/account/api-keys.";
  const { fetch, sent } = stubFetch(
    respond(401, {
      error: { message: providerMessage, type: "invalid_request_error", code: "invalid_api_key" },
    }),
  );
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.status, 401);
  assert.equal(sent.length, 1);
  assert.equal(
    error.message,
    "LLM request failed: HTTP 401 from api.example.com: Incorrect API key provided: [redacted]. " +
      "You can find your API key at https://platform.openai.com/account/api-keys.",
  );
  assertNoKey(error);
});

Deno.test("HttpLLM.chat() quotes a short cut of a non-JSON error body", async () => {
  const page = `<html><body>${"Not Found ".repeat(100)}</body></html>`;
  const { fetch } = stubFetch(respond(404, page));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.ok(
    error.message.startsWith("LLM request failed: HTTP 404 from api.example.com: <html><body>Not Found"),
  );
  assert.ok(error.message.endsWith("…"));
  assert.ok(error.message.length < 300, `${error.message.length} chars`);
});

Deno.test("HttpLLM.chat() gives up after the configured retries with waits of 0.5 s and 1 s", async () => {
  const { fetch, sent } = stubFetch(respond(500, { error: { message: "The server had an error" } }));
  const { llm, delays } = makeClient(fetch, { retries: 2 });
  const error = await llmError(llm.chat(HELLO));
  assert.deepEqual(delays, [500, 1000]);
  assert.equal(sent.length, 3);
  assert.equal(error.kind, "http");
  assert.equal(error.status, 500);
  assert.equal(error.retries, 2);
  assert.equal(
    error.message,
    "LLM request failed: HTTP 500 from api.example.com: The server had an error (3 attempts)",
  );
});

Deno.test("HttpLLM.chat() tries once when retries is 0", async () => {
  const { fetch, sent } = stubFetch(respond(503, "down"));
  const { llm, delays } = makeClient(fetch, { retries: 0 });
  const error = await llmError(llm.chat(HELLO));
  assert.equal(error.retries, 0);
  assert.equal(sent.length, 1);
  assert.deepEqual(delays, []);
});

Deno.test("HttpLLM.chat() reports each retry to onRetry", async () => {
  const infos: RetryInfo[] = [];
  const { fetch } = stubFetch(respond(500, "boom"), respond(429, "", { "Retry-After": "1" }), OK);
  const { llm } = makeClient(fetch, { onRetry: (info) => infos.push(info) });
  await llm.chat(HELLO);
  assert.deepEqual(infos, [
    { attempt: 1, delayMs: 500, reason: "LLM request failed: HTTP 500 from api.example.com: boom" },
    { attempt: 2, delayMs: 1000, reason: "LLM request failed: HTTP 429 from api.example.com" },
  ]);
});

Deno.test("HttpLLM.chat() retries a network failure and redacts the key from its text", async () => {
  const infos: RetryInfo[] = [];
  const { fetch, sent } = stubFetch(
    throwing(new TypeError("fetch failed", { cause: new Error(`proxy refused token ${KEY}`) })),
    OK,
  );
  const { llm, delays } = makeClient(fetch, { onRetry: (info) => infos.push(info) });
  assert.equal((await llm.chat(HELLO)).content, "ok");
  assert.equal(sent.length, 2);
  assert.deepEqual(delays, [500]);
  assert.equal(
    infos[0].reason,
    "LLM host api.example.com is unreachable: fetch failed: proxy refused token [redacted]",
  );
});

Deno.test("HttpLLM.chat() names the host when the network stays down, without the URL or key", async () => {
  const cause = new Error(
    `error sending request for url (${BASE}/chat/completions?key=${KEY}): connection reset`,
  );
  const { fetch, sent } = stubFetch(throwing(new TypeError("fetch failed", { cause })));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "network");
  assert.equal(error.retries, 2);
  assert.equal(sent.length, 3);
  assert.equal(
    error.message,
    "LLM host api.example.com is unreachable: fetch failed: error sending request for url (api.example.com): " +
      "connection reset (3 attempts)",
  );
  assertNoKey(error);
});

Deno.test("HttpLLM.chat() does not retry a host name that does not resolve, and names its origin only", async () => {
  const cause = new Error(
    `error sending request for url (${BASE}/chat/completions?key=${KEY}): client error (Connect): dns error: ` +
      "failed to lookup address information: Name or service not known",
  );
  const { fetch, sent } = stubFetch(throwing(new TypeError("fetch failed", { cause })));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "network");
  assert.equal(sent.length, 1);
  assert.equal(
    error.message,
    `cannot connect to ${new URL(BASE).origin}: the host name does not resolve (DNS)`,
  );
  assertNoKey(error);
});

Deno.test("HttpLLM.chat() does not retry a fetch that fails with something other than TypeError", async () => {
  const { fetch, sent } = stubFetch(throwing(new RangeError("stub broke")));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "network");
  assert.equal(sent.length, 1);
});

Deno.test("HttpLLM.chat() fails with invalid_response on a body that is not JSON, without retry", async () => {
  const { fetch, sent } = stubFetch(respond(200, `<html>login required for ${KEY}</html>`));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "invalid_response");
  assert.equal(error.retries, 0);
  assert.equal(sent.length, 1);
  assert.equal(
    error.message,
    "Invalid LLM response from api.example.com: body is not JSON: <html>login required for [redacted]</html>",
  );
  assertNoKey(error);
});

Deno.test("HttpLLM.chat() fails with invalid_response on JSON without choices", async () => {
  const { fetch, sent } = stubFetch(respond(200, { id: "x", object: "chat.completion" }));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "invalid_response");
  assert.equal(error.message, 'Invalid LLM response from api.example.com: "choices" is missing or empty');
  assert.equal(sent.length, 1);
});

Deno.test("HttpLLM.chat() shows the error a gateway returned with status 200", async () => {
  const { fetch } = stubFetch(respond(200, { error: { message: "Upstream model overloaded" } }));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "invalid_response");
  assert.match(error.message, /provider said: Upstream model overloaded/);
});

// ---------------------------------------------------------------------------------------------------------
// Aborts

Deno.test("HttpLLM.chat() fails with kind aborted when the caller aborts mid-request", async () => {
  const controller = new AbortController();
  const step: Step = (signal) => {
    controller.abort();
    return hang()(signal);
  };
  const { fetch, sent } = stubFetch(step, OK);
  const { llm, delays } = makeClient(fetch);
  const error = await llmError(llm.chat(HELLO, { signal: controller.signal }));
  assert.equal(error.kind, "aborted");
  assert.equal(error.retries, 0);
  assert.equal(error.message, "LLM request was aborted");
  assert.equal(sent.length, 1);
  assert.deepEqual(delays, []);
});

Deno.test("HttpLLM.chat() sends nothing when the signal is already aborted", async () => {
  const { fetch, sent } = stubFetch(OK);
  const error = await llmError(makeClient(fetch).llm.chat(HELLO, { signal: AbortSignal.abort() }));
  assert.equal(error.kind, "aborted");
  assert.equal(sent.length, 0);
});

Deno.test("HttpLLM.chat() stops a real backoff wait when the caller aborts", async () => {
  const controller = new AbortController();
  let abortTimer: ReturnType<typeof setTimeout> | undefined;
  let failsafe: ReturnType<typeof setTimeout> | undefined;
  const { fetch, sent } = stubFetch(respond(500, "boom"), OK);
  // An hour's backoff: a wait the abort did not end would hold the test, and the failsafe fails it instead;
  // one it ended but left running fails the ops sanitizer.
  const llm = new HttpLLM({
    baseUrl: BASE,
    apiKey: KEY,
    model: MODEL,
    fetch,
    retryBaseDelaySeconds: 3600,
    onRetry: () => {
      abortTimer = setTimeout(() => controller.abort(), 10);
    },
  });
  const hung = new Promise<never>((_, reject) => {
    failsafe = setTimeout(() => reject(new Error("the abort did not end the backoff wait")), 30_000);
  });
  try {
    const error = await llmError(Promise.race([llm.chat(HELLO, { signal: controller.signal }), hung]));
    assert.equal(error.kind, "aborted");
    assert.equal(error.retries, 0);
  } finally {
    clearTimeout(abortTimer);
    clearTimeout(failsafe);
  }
  assert.equal(sent.length, 1);
});

Deno.test("HttpLLM.chat() really waits the backoff with the default sleep", async () => {
  // Timers fire in the order they fall due: a 10 ms one, set before the call, fires before the 20 ms backoff
  // set after it. A client that did not wait would retry before any timer fired.
  let fired = false;
  const shorter = setTimeout(() => (fired = true), 10);
  let firedByRetry: boolean | undefined;
  const { fetch, sent } = stubFetch(respond(500, "boom"), (signal) => {
    firedByRetry = fired;
    return OK(signal);
  });
  const llm = new HttpLLM({ baseUrl: BASE, model: MODEL, fetch, retryBaseDelaySeconds: 0.02 });
  try {
    assert.equal((await llm.chat(HELLO)).content, "ok");
  } finally {
    clearTimeout(shorter);
  }
  assert.equal(firedByRetry, true, "the retry came after a timer due before the backoff ended");
  assert.equal(sent.length, 2);
});

// ---------------------------------------------------------------------------------------------------------
// parseCompletion

function parsed(message: Record<string, unknown>, extra: Record<string, unknown> = {}): ChatReply {
  return parseCompletion(completion(message, extra), { model: MODEL });
}

function invalidReason(body: unknown): string {
  try {
    parseCompletion(body, { source: "host.test" });
  } catch (error) {
    assert.ok(error instanceof LlmError);
    assert.equal(error.kind, "invalid_response");
    return error.message;
  }
  assert.fail("expected parseCompletion() to throw");
}

Deno.test("parseCompletion() serializes tool arguments sent as an object and fills in missing ones", () => {
  const reply = parsed({
    content: null,
    tool_calls: [
      { id: "a", type: "function", function: { name: "calculator", arguments: { expression: "1+1" } } },
      { id: "b", type: "function", function: { name: "todo_list" } },
      { id: "c", function: { name: "search", arguments: "" } },
    ],
  });
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "calculator", arguments: '{"expression":"1+1"}' },
    { id: "b", name: "todo_list", arguments: "{}" },
    { id: "c", name: "search", arguments: "{}" },
  ]);
});

Deno.test("parseCompletion() keeps a malformed tool call as a call with a problem, beside the good ones", () => {
  const reply = parsed({
    content: null,
    tool_calls: [
      { type: "function", function: { name: "x", arguments: "{}" } },
      { id: "b", type: "function", function: { arguments: '{"q":1}' } },
      { id: "c", type: "function", function: { name: "", arguments: "{}" } },
      { id: "d", type: "function", function: { name: "calculator", arguments: 42 } },
      { id: "e", type: "function", function: { name: "calculator", arguments: [1, 2] } },
      { id: "f", type: "function" },
      "not a call",
      { id: "g", type: "function", function: { name: "calculator", arguments: { expression: "1+1" } } },
    ],
  });
  assert.deepEqual(reply.toolCalls, [
    { id: "", name: "x", arguments: "{}" },
    { id: "b", name: "invalid_tool_call", arguments: '{"q":1}', problem: "it has no function name" },
    { id: "c", name: "invalid_tool_call", arguments: "{}", problem: "it has no function name" },
    {
      id: "d",
      name: "calculator",
      arguments: "{}",
      problem: "its arguments must be a JSON string or object, got number",
    },
    {
      id: "e",
      name: "calculator",
      arguments: "{}",
      problem: "its arguments must be a JSON string or object, got array",
    },
    { id: "f", name: "invalid_tool_call", arguments: "{}", problem: "it has no function name" },
    { id: "", name: "invalid_tool_call", arguments: "{}", problem: "the call is string, not an object" },
    { id: "g", name: "calculator", arguments: '{"expression":"1+1"}' },
  ]);
});

Deno.test("parseCompletion() turns an empty text beside tool calls into null and keeps it otherwise", () => {
  const call = { id: "a", type: "function", function: { name: "x", arguments: "{}" } };
  assert.equal(parsed({ content: "", tool_calls: [call] }).content, null);
  assert.equal(parsed({ content: "" }).content, "");
  assert.equal(parsed({ content: "  spaced  " }).content, "  spaced  ");
  assert.equal(parsed({ content: "Checking.", tool_calls: [call] }).content, "Checking.");
  assert.equal(parsed({}).content, null);
});

Deno.test("parseCompletion() reports usage as given, null when absent, never invented", () => {
  assert.equal(parsed({ content: "x" }, { usage: undefined }).usage, null);
  assert.equal(parsed({ content: "x" }, { usage: null }).usage, null);
  assert.deepEqual(parsed({ content: "x" }, { usage: { prompt_tokens: 7, total_tokens: "9" } }).usage, {
    promptTokens: 7,
    completionTokens: null,
    totalTokens: null,
    cachedTokens: null,
  });
});

Deno.test("parseCompletion() drops reasoning_content and other fields it does not know", () => {
  const reply = parsed({ content: "3", reasoning_content: "SECRET-CHAIN", refusal: null, annotations: [] }, {
    logprobs: null,
  });
  assert.deepEqual(reply, {
    content: "3",
    toolCalls: [],
    usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5, cachedTokens: null },
    model: "served-model",
    finishReason: "stop",
  });
  assert.ok(!JSON.stringify(reply).includes("SECRET-CHAIN"));
});

Deno.test("parseCompletion() keeps the choice's finish_reason, null when it is not a non-empty string", () => {
  const body = (finish: unknown) => ({ choices: [{ message: { content: "x" }, finish_reason: finish }] });
  assert.equal(parseCompletion(body("length")).finishReason, "length");
  assert.equal(parseCompletion(body("tool_calls")).finishReason, "tool_calls");
  for (const finish of [null, undefined, "", 7]) {
    assert.equal(parseCompletion(body(finish)).finishReason, null, String(finish));
  }
  assert.equal(parseCompletion({ choices: [{ message: { content: "x" } }] }).finishReason, null);
});

Deno.test("parseCompletion() names the model of the body, else the one given, else nothing", () => {
  assert.equal(parseCompletion({ choices: [{ message: { content: "x" } }] }, { model: MODEL }).model, MODEL);
  assert.equal(parseCompletion({ choices: [{ message: { content: "x" } }] }).model, "");
});

Deno.test("parseCompletion() rejects bodies that are not completions", () => {
  const cases: [unknown, string][] = [
    ["just text", "body is not a JSON object"],
    [[1, 2], "body is not a JSON object"],
    [null, "body is not a JSON object"],
    [{ choices: [] }, '"choices" is missing or empty'],
    [{ choices: "no" }, '"choices" is missing or empty'],
    [{ choices: [{ index: 0 }] }, "choices[0].message is missing"],
    [{ choices: [{ message: { content: 42 } }] }, "choices[0].message.content is neither a string nor null"],
    [{ choices: [{ message: { tool_calls: {} } }] }, "choices[0].message.tool_calls is not an array"],
  ];
  for (const [body, reason] of cases) {
    assert.equal(invalidReason(body), `Invalid LLM response from host.test: ${reason}`, JSON.stringify(body));
  }
});

// ---------------------------------------------------------------------------------------------------------
// Options

Deno.test("new HttpLLM() rejects malformed options before any request", () => {
  const fetch = stubFetch(OK).fetch;
  const base = { baseUrl: BASE, model: MODEL, fetch };
  const cases: [Partial<HttpLLMOptions>, string, RegExp][] = [
    [{ baseUrl: "not a url" }, "TypeError", /"baseUrl" must be an http\(s\) URL/],
    [{ baseUrl: "ftp://example.com" }, "TypeError", /"baseUrl" must be an http\(s\) URL, got ftp:/],
    [{ model: " " }, "TypeError", /"model" must be a non-empty string/],
    [{ timeoutSeconds: 0 }, "RangeError", /"timeoutSeconds" must be a number greater than 0, got 0/],
    [{ timeoutSeconds: Infinity }, "RangeError", /"timeoutSeconds"/],
    [{ retries: 1.5 }, "RangeError", /"retries" must be a whole number of 0 or more, got 1.5/],
    [{ retries: -1 }, "RangeError", /"retries"/],
    [{ retryBaseDelaySeconds: -0.1 }, "RangeError", /"retryBaseDelaySeconds" must be a number of 0 or more/],
    [{ retries: "2" as unknown as number }, "TypeError", /"retries" must be .*, got string/],
    [{ fetch: "fetch" as unknown as typeof globalThis.fetch }, "TypeError", /"fetch" must be a function/],
    [{ apiKey: 1 as unknown as string }, "TypeError", /"apiKey" must be a string/],
    [
      { reasoningEffort: "max" as "high" },
      "TypeError",
      /"reasoningEffort" must be low, medium, high or null, got "max"/,
    ],
    [{ reasoningEffort: 2 as unknown as "high" }, "TypeError", /"reasoningEffort" must be .*, got number/],
  ];
  for (const [override, name, message] of cases) {
    assert.throws(
      () => new HttpLLM({ ...base, ...override }),
      { name, message },
      JSON.stringify(override),
    );
  }
});
