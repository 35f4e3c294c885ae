import { Ajv2020 } from "./_dev_deps.ts";
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { loadConfig } from "../src/config.ts";
import { LlmError } from "../src/errors.ts";
import { ReplyAssembler } from "../src/llm/stream.ts";
import { createLlmFromConfig, HttpLLM, type HttpLLMOptions } from "../src/llm/client.ts";
import type { ChatReply, ToolSchema } from "../src/types.ts";
import {
  BASE,
  cutBytes,
  HELLO,
  KEY,
  llmError,
  makeClient as makeStubClient,
  MODEL,
  OPENAPI,
  respond,
  type Step,
  stubFetch,
  WIRE,
} from "./_openai_stubs.ts";

const encoder = new TextEncoder();

// ---------------------------------------------------------------------------------------------------------
// Stubs

/** How a stubbed body ends after its chunks. */
type Ending = "close" | "error" | "stall";

interface Body {
  stream: ReadableStream<Uint8Array>;
  /** How many times the client cancelled it. */
  cancelled: () => number;
}

/** A body that hands out `chunks` one read at a time, then closes, errors or goes silent. */
function body(chunks: (string | Uint8Array)[], ending: Ending = "close", delayMs = 0): Body {
  let next = 0;
  let cancels = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (next < chunks.length) {
        if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
        const chunk = chunks[next++];
        controller.enqueue(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      } else if (ending === "close") controller.close();
      else if (ending === "error") controller.error(new TypeError("connection reset by peer"));
      else await new Promise(() => {}); // silent until cancelled; not an op, so the sanitizer is content
    },
    cancel() {
      cancels++;
    },
  }, { highWaterMark: 0 });
  return { stream, cancelled: () => cancels };
}

function sseStep(source: Body | (() => Body), status = 200): Step {
  return () => {
    const { stream } = typeof source === "function" ? source() : source;
    return Promise.resolve(
      new Response(stream, { status, headers: { "content-type": "text/event-stream" } }),
    );
  };
}

/** A streaming client on `fetch` (`stream: false` for the whole-reply comparison). */
function makeClient(fetch: typeof globalThis.fetch, options: Partial<HttpLLMOptions> = {}) {
  return makeStubClient(fetch, { stream: true, ...options });
}

/** One `data:` event per chunk; the string "[DONE]" as is. */
function sse(...chunks: unknown[]): string {
  return chunks.map((chunk) => `data: ${typeof chunk === "string" ? chunk : JSON.stringify(chunk)}\n\n`).join(
    "",
  );
}

function chunk(
  delta: Record<string, unknown>,
  finish: string | null = null,
  extra: Record<string, unknown> = {},
) {
  return {
    id: "chatcmpl-test",
    object: "chat.completion.chunk",
    model: "served-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  };
}

const USAGE_CHUNK = {
  id: "chatcmpl-test",
  object: "chat.completion.chunk",
  model: "served-model",
  choices: [],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};

/** "ok" in two pieces, OpenAI style, as one string per event. */
const OK_EVENTS = [
  sse(chunk({ role: "assistant", content: "" })),
  sse(chunk({ content: "o" })),
  sse(chunk({ content: "k" })),
  sse(chunk({}, "stop")),
  sse(USAGE_CHUNK),
  sse("[DONE]"),
];
const OK_REPLY: ChatReply = {
  content: "ok",
  toolCalls: [],
  usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5, cachedTokens: null },
  model: "served-model",
  finishReason: "stop",
};

// ---------------------------------------------------------------------------------------------------------
// Recorded streams

interface StreamCase {
  /** The fixture file and, for DeepSeek's, whether `[DONE]` was appended. */
  label: string;
  file: string;
  bytes: Uint8Array;
  // deno-lint-ignore no-explicit-any
  events: any[];
}

const STREAM_FILES = [...Deno.readDirSync(WIRE)]
  .map((entry) => entry.name)
  .filter((name) => name.endsWith(".stream.json"))
  .sort();

function readJson(name: string) {
  return JSON.parse(Deno.readTextFileSync(new URL(name, WIRE)));
}

/**
 * Every recorded stream as the bytes a server sends. OpenAI's files hold the exact bytes; DeepSeek's hold
 * one chunk per line, wrapped here as `data: <line>\n\n`, once with `data: [DONE]` and once without (their
 * last chunk has a finish_reason, so both must work).
 */
const STREAM_CASES: StreamCase[] = STREAM_FILES.flatMap((file) => {
  const fixture = readJson(file);
  if (typeof fixture.sse_raw === "string") {
    return [{ label: file, file, bytes: encoder.encode(fixture.sse_raw), events: fixture.events }];
  }
  const lines = (fixture.chunks_raw as string).split("\n").filter((line) => line !== "");
  const wrapped = lines.map((line) => `data: ${line}\n\n`).join("");
  return [
    {
      label: `${file} + [DONE]`,
      file,
      bytes: encoder.encode(`${wrapped}data: [DONE]\n\n`),
      events: fixture.events,
    },
    { label: `${file} without [DONE]`, file, bytes: encoder.encode(wrapped), events: fixture.events },
  ];
});

/**
 * The non-streaming body the recorded chunks stand for, built here independently of the client: content
 * and arguments concatenated, calls keyed by index, the last non-null usage, the first model.
 */
// deno-lint-ignore no-explicit-any
function collapse(events: any[]): Record<string, unknown> {
  let content: string | null = null;
  // deno-lint-ignore no-explicit-any
  const calls: any[] = [];
  let usage: unknown = null;
  let model: string | undefined;
  let finish: string | null = null;
  for (const event of events) {
    if (event === null) continue;
    model ??= event.model;
    if (event.usage) usage = event.usage;
    for (const choice of event.choices) {
      const delta = choice.delta ?? {};
      if (typeof delta.content === "string") content = (content ?? "") + delta.content;
      for (const fragment of delta.tool_calls ?? []) {
        calls[fragment.index] ??= {
          id: fragment.id,
          type: "function",
          function: { name: "", arguments: "" },
        };
        if (fragment.function?.name) calls[fragment.index].function.name = fragment.function.name;
        calls[fragment.index].function.arguments += fragment.function?.arguments ?? "";
      }
      finish = choice.finish_reason ?? finish;
    }
  }
  const message: Record<string, unknown> = { role: "assistant", content };
  if (calls.length > 0) message.tool_calls = calls;
  return { object: "chat.completion", model, choices: [{ index: 0, message, finish_reason: finish }], usage };
}

/** The answer-text pieces of the recorded chunks, which `onDelta` must receive exactly. */
// deno-lint-ignore no-explicit-any
function contentPieces(events: any[]): string[] {
  return events.flatMap((event) =>
    (event?.choices ?? []).map((choice: { delta?: { content?: unknown } }) => choice.delta?.content)
      .filter((piece: unknown): piece is string => typeof piece === "string" && piece !== "")
  );
}

// deno-lint-ignore no-explicit-any
function reasoningText(events: any[]): string {
  return events.map((event) => event?.choices?.[0]?.delta?.reasoning_content ?? "").join("");
}

/** What the non-streaming client returns for the collapsed body: the streamed reply must equal it. */
async function nonStreamingReply(events: unknown[]): Promise<ChatReply> {
  const { fetch } = stubFetch(respond(200, JSON.stringify(collapse(events))));
  return await makeClient(fetch, { stream: false }).llm.chat(HELLO);
}

/** Hand-read from the recordings, so a mistake shared by the client and `collapse` still fails. */
const SPOT_CHECKS: Record<string, ChatReply> = {
  "deepseek-reasoning.stream.json": {
    content: 'The word "strawberry" contains three "r"s.',
    toolCalls: [],
    usage: { promptTokens: 18, completionTokens: 219, totalTokens: 237, cachedTokens: 0 },
    model: "deepseek-reasoner",
    finishReason: "stop",
  },
  "deepseek-toolcall-reasoning.stream.json": {
    content: null,
    toolCalls: [{
      id: "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF",
      name: "weather",
      arguments: '{"location": "San Francisco"}',
    }],
    usage: { promptTokens: 339, completionTokens: 83, totalTokens: 422, cachedTokens: 320 },
    model: "deepseek-reasoner",
    finishReason: "tool_calls",
  },
  "openai-gpt35-text-include_usage-obfuscation.stream.json": {
    content: "Hi, how are you?",
    toolCalls: [],
    usage: { promptTokens: 10, completionTokens: 5, totalTokens: 15, cachedTokens: 0 },
    model: "gpt-3.5-turbo-0125",
    finishReason: "stop",
  },
  "openai-gpt4o-toolcall.stream.json": {
    content: null,
    toolCalls: [{
      id: "call_c91SqDXlYFuETYv8mUHzz6pp",
      name: "GetWeatherArgs",
      arguments: '{"city":"Edinburgh","country":"UK","units":"c"}',
    }],
    usage: { promptTokens: 76, completionTokens: 24, totalTokens: 100, cachedTokens: null },
    model: "gpt-4o-2024-08-06",
    finishReason: "tool_calls",
  },
  "openai-gpt4o-toolcalls-parallel.stream.json": {
    content: null,
    toolCalls: [
      {
        id: "call_JMW1whyEaYG438VE1OIflxA2",
        name: "GetWeatherArgs",
        arguments: '{"city": "Edinburgh", "country": "GB", "units": "c"}',
      },
      {
        id: "call_DNYTawLBoN8fj3KN6qU9N1Ou",
        name: "get_stock_price",
        arguments: '{"ticker": "AAPL", "exchange": "NASDAQ"}',
      },
    ],
    usage: { promptTokens: 149, completionTokens: 60, totalTokens: 209, cachedTokens: null },
    model: "gpt-4o-2024-08-06",
    finishReason: "tool_calls",
  },
};

/** The reply without its provider state, which the recording's reasoning makes (see `assertStreamedReply`). */
function seen(reply: ChatReply): ChatReply {
  const { providerState: _, ...rest } = reply;
  return rest;
}

/**
 * The reply, its deltas and the promise that no reasoning leaked, checked against the recording: its
 * `reasoning_content` is kept whole as provider state only.
 */
async function assertStreamedReply(item: StreamCase, reply: ChatReply, deltas: string[]): Promise<void> {
  assert.deepEqual(seen(reply), SPOT_CHECKS[item.file], "hand-read reply");
  assert.deepEqual(
    seen(reply),
    seen(await nonStreamingReply(item.events)),
    "the non-streaming reply of the same answer",
  );
  const kept = reply.providerState?.message?.reasoning_content;
  assert.equal(kept ?? "", reasoningText(item.events), "the reasoning is kept whole, as provider state");
  assert.deepEqual(deltas, contentPieces(item.events), "onDelta got every answer piece, in order");
  assert.equal(deltas.join(""), reply.content ?? "");
  const reasoning = reasoningText(item.events);
  if (reasoning !== "") {
    const joined = deltas.join("");
    assert.ok(!joined.includes(reasoning.slice(0, 40)), "no reasoning text reached onDelta");
    assert.ok(
      !JSON.stringify(seen(reply)).includes(reasoning.slice(0, 40)),
      "no reasoning text in the reply",
    );
  }
}

Deno.test("the wire fixture folder holds the five recorded streams", () => {
  assert.deepEqual(STREAM_FILES, Object.keys(SPOT_CHECKS).sort());
  assert.equal(STREAM_CASES.length, 7);
});

for (const item of STREAM_CASES) {
  Deno.test(`HttpLLM({stream: true}) reads ${item.label} from a real loopback server`, async () => {
    const received: { body: unknown; accept: string | null }[] = [];
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
      received.push({ body: await request.json(), accept: request.headers.get("accept") });
      // A few writes, so the client sees more than one network chunk.
      const pieces = cutBytes(item.bytes, [17, 1000, 1001, 4096, 9000, 30000]);
      return new Response(body(pieces).stream, { headers: { "content-type": "text/event-stream" } });
    });
    try {
      const llm = new HttpLLM({
        baseUrl: `http://127.0.0.1:${server.addr.port}/v1`,
        apiKey: KEY,
        model: MODEL,
        stream: true,
      });
      const deltas: string[] = [];
      const reply = await llm.chat(HELLO, { onDelta: (text) => deltas.push(text) });
      await assertStreamedReply(item, reply, deltas);
      assert.deepEqual(received, [{
        body: {
          model: MODEL,
          messages: [{ role: "user", content: "hello" }],
          stream: true,
          stream_options: { include_usage: true },
        },
        accept: "text/event-stream",
      }]);
    } finally {
      await server.shutdown();
    }
  });

  Deno.test(`HttpLLM({stream: true}) reassembles ${item.label} however it is cut (property)`, async () => {
    const expected = SPOT_CHECKS[item.file];
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 1, max: item.bytes.length - 1 }), { maxLength: 80 }),
        async (positions) => {
          const { fetch, sent } = stubFetch(sseStep(body(cutBytes(item.bytes, positions))));
          const deltas: string[] = [];
          const reply = await makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) });
          assert.deepEqual(seen(reply), expected);
          assert.equal(reply.providerState?.message?.reasoning_content ?? "", reasoningText(item.events));
          assert.deepEqual(deltas, contentPieces(item.events));
          assert.equal(sent.length, 1);
        },
      ),
      { numRuns: 50 },
    );
  });
}

/** What the recorded pairs really share: the `.stream` and `.nonstream` files are separate recordings. */
const PAIRS: [stream: string, nonstream: string, shared: (reply: ChatReply) => unknown][] = [
  // Same question, same arguments and usage; only the call ids differ.
  [
    "openai-gpt4o-toolcalls-parallel.stream.json",
    "openai-gpt4o-toolcalls-parallel.nonstream.json",
    withoutIds,
  ],
  // Same call and arguments; ids and token counts differ.
  ["deepseek-toolcall-reasoning.stream.json", "deepseek-toolcall-reasoning.nonstream.json", (reply) => ({
    ...(withoutIds(reply) as object),
    usage: "differs",
  })],
  // Different tools (GetWeatherArgs vs get_weather, strict) and answers: only the shape is shared.
  ["openai-gpt4o-toolcall.stream.json", "openai-gpt4o-toolcall-strict.nonstream.json", shape],
  // Different answer texts and token counts.
  ["deepseek-reasoning.stream.json", "deepseek-reasoning.nonstream.json", shape],
];

function withoutIds(reply: ChatReply): unknown {
  return { ...seen(reply), toolCalls: reply.toolCalls.map(({ name, arguments: args }) => ({ name, args })) };
}

function shape(reply: ChatReply): unknown {
  return {
    content: reply.content === null ? null : typeof reply.content,
    calls: reply.toolCalls.length,
    model: reply.model,
    promptTokens: reply.usage?.promptTokens !== undefined,
  };
}

for (const [streamFile, nonstreamFile, shared] of PAIRS) {
  Deno.test(`the streamed ${streamFile} agrees with ${nonstreamFile} where the recordings agree`, async () => {
    const item = STREAM_CASES.find((candidate) => candidate.file === streamFile)!;
    const { fetch } = stubFetch(sseStep(body([item.bytes])));
    const streamed = await makeClient(fetch).llm.chat(HELLO);
    const { fetch: plainFetch } = stubFetch(respond(200, readJson(nonstreamFile).http_body_raw));
    const whole = await makeClient(plainFetch, { stream: false }).llm.chat(HELLO);
    assert.deepEqual(shared(streamed), shared(whole));
  });
}

Deno.test("HttpLLM({stream: true}) decodes multi-byte text cut anywhere (property)", async () => {
  const pieces = ["Grüße", " 🌍", " 日本語", "", " naïve ✓"];
  const all = encoder.encode(
    sse(chunk({ role: "assistant", content: "" }), ...pieces.map((piece) => chunk({ content: piece }))) +
      sse(chunk({}, "stop"), USAGE_CHUNK, "[DONE]"),
  );
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.integer({ min: 1, max: all.length - 1 }), { maxLength: 60 }),
      async (cuts) => {
        const { fetch } = stubFetch(sseStep(body(cutBytes(all, cuts))));
        const deltas: string[] = [];
        const reply = await makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) });
        assert.deepEqual(reply, { ...OK_REPLY, content: pieces.join("") });
        assert.deepEqual(deltas, pieces.filter((piece) => piece !== ""));
      },
    ),
    { numRuns: 100 },
  );
});

// ---------------------------------------------------------------------------------------------------------
// The request

const OPENAPI_ID = "chat-completions.openapi.json";
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(JSON.parse(Deno.readTextFileSync(OPENAPI)), OPENAPI_ID);
const validateRequest = ajv.getSchema(`${OPENAPI_ID}#/components/schemas/CreateChatCompletionRequest`)!;

const TOOLS: ToolSchema[] = [{
  name: "calculator",
  description: "Evaluates an arithmetic expression.",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
}];

Deno.test("HttpLLM({stream: true}) sends a schema-valid body with stream and stream_options", async () => {
  const { fetch, sent } = stubFetch(sseStep(() => body(OK_EVENTS)));
  await makeClient(fetch).llm.chat(HELLO, { tools: TOOLS });
  const sentBody = sent[0].body;
  assert.ok(
    validateRequest(sentBody),
    `request body rejected: ${ajv.errorsText(validateRequest.errors)}\n${JSON.stringify(sentBody)}`,
  );
  assert.deepEqual(sentBody, {
    model: MODEL,
    messages: [{ role: "user", content: "hello" }],
    tools: [{ type: "function", function: TOOLS[0] }],
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.equal(sent[0].headers.get("accept"), "text/event-stream");
  assert.equal(sent[0].headers.get("content-type"), "application/json");
  assert.equal(sent[0].headers.get("authorization"), `Bearer ${KEY}`);
  // The validator does look at the streaming fields.
  assert.equal(validateRequest({ ...sentBody, stream_options: { include_usage: "yes" } }), false);
  assert.equal(validateRequest({ ...sentBody, stream: "true" }), false);
});

Deno.test("HttpLLM({stream: true}) sends reasoning_effort before stream when one is set, none otherwise", async () => {
  const effort = stubFetch(sseStep(() => body(OK_EVENTS)));
  const streaming = makeClient(effort.fetch, { reasoningEffort: "medium" }).llm;
  assert.deepEqual(await streaming.chat(HELLO), OK_REPLY);
  const sentBody = effort.sent[0].body;
  assert.ok(validateRequest(sentBody), ajv.errorsText(validateRequest.errors));
  assert.deepEqual(sentBody, {
    model: MODEL,
    messages: [{ role: "user", content: "hello" }],
    reasoning_effort: "medium",
    stream: true,
    stream_options: { include_usage: true },
  });
  assert.deepEqual(Object.keys(sentBody), [
    "model",
    "messages",
    "reasoning_effort",
    "stream",
    "stream_options",
  ]);
  const plain = stubFetch(sseStep(() => body(OK_EVENTS)));
  await makeClient(plain.fetch, { reasoningEffort: null }).llm.chat(HELLO);
  assert.equal(Object.hasOwn(plain.sent[0].body, "reasoning_effort"), false);
});

Deno.test("HttpLLM() without stream sends today's body and never calls onDelta", async () => {
  const completion = {
    model: "served-model",
    choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  };
  const { fetch, sent } = stubFetch(respond(200, JSON.stringify(completion)));
  const llm = new HttpLLM({ baseUrl: BASE, apiKey: KEY, model: MODEL, fetch });
  const deltas: string[] = [];
  assert.deepEqual(await llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }), OK_REPLY);
  assert.deepEqual(sent[0].body, { model: MODEL, messages: [{ role: "user", content: "hello" }] });
  assert.equal(sent[0].headers.has("accept"), false);
  assert.deepEqual(deltas, []);
});

Deno.test("createLlmFromConfig() streams only when told to", async () => {
  const config = loadConfig({ OPENAI_API_KEY: KEY });
  const streaming = stubFetch(sseStep(() => body(OK_EVENTS)));
  assert.deepEqual(
    await createLlmFromConfig(config, { fetch: streaming.fetch, stream: true }).chat(HELLO),
    OK_REPLY,
  );
  assert.equal(streaming.sent[0].body.stream, true);
  const plain = stubFetch(respond(200, JSON.stringify({ choices: [{ message: { content: "ok" } }] })));
  await createLlmFromConfig(config, { fetch: plain.fetch }).chat(HELLO);
  assert.equal(Object.hasOwn(plain.sent[0].body, "stream"), false);
});

Deno.test("createLlmFromConfig() sends AGENT_REASONING_EFFORT as reasoning_effort, and nothing when it is unset", async () => {
  for (const [env, expected] of [[{ AGENT_REASONING_EFFORT: "low" }, "low"], [{}, undefined]] as const) {
    const config = loadConfig({ OPENAI_API_KEY: KEY, ...env });
    const plain = stubFetch(respond(200, JSON.stringify({ choices: [{ message: { content: "ok" } }] })));
    await createLlmFromConfig(config, { fetch: plain.fetch }).chat(HELLO);
    assert.equal(plain.sent[0].body.reasoning_effort, expected);
    assert.equal(Object.hasOwn(plain.sent[0].body, "reasoning_effort"), expected !== undefined);
  }
});

Deno.test("new HttpLLM() rejects a malformed stream or idleTimeoutSeconds", () => {
  const base = { baseUrl: BASE, model: MODEL };
  assert.throws(() => new HttpLLM({ ...base, stream: "yes" as unknown as boolean }), {
    name: "TypeError",
    message: 'Cannot create HttpLLM: "stream" must be a boolean, got string',
  });
  assert.throws(() => new HttpLLM({ ...base, idleTimeoutSeconds: 0 }), {
    name: "RangeError",
    message: 'Cannot create HttpLLM: "idleTimeoutSeconds" must be a number greater than 0, got 0',
  });
});

// ---------------------------------------------------------------------------------------------------------
// What a stream may carry

Deno.test("HttpLLM({stream: true}) skips comments, pings and data after [DONE], and frees the body", async () => {
  const source = body([
    ": OPENROUTER PROCESSING\n\n",
    "event: ping\ndata: {}\n\n",
    ...OK_EVENTS,
    sse(chunk({ content: "never read" })),
  ]);
  const { fetch } = stubFetch(sseStep(source));
  const deltas: string[] = [];
  assert.deepEqual(
    await makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }),
    OK_REPLY,
  );
  assert.deepEqual(deltas, ["o", "k"]);
  assert.equal(source.cancelled(), 1, "the rest of the body was cancelled");
});

Deno.test("HttpLLM({stream: true}) reads a server that ignores stream and sends JSON", async () => {
  const completion = { model: "served-model", choices: [{ message: { content: "whole" } }] };
  const { fetch } = stubFetch(
    respond(200, JSON.stringify(completion), { "content-type": "application/json" }),
  );
  const deltas: string[] = [];
  const reply = await makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) });
  assert.equal(reply.content, "whole");
  assert.deepEqual(deltas, ["whole"]);
});

Deno.test("HttpLLM({stream: true}) keeps a stream whose silences stay under idleTimeoutSeconds", async () => {
  // Six chunks 40 ms apart: 240 ms in all, each silence far below the 150 ms idle deadline.
  const { fetch } = stubFetch(sseStep(body(OK_EVENTS, "close", 40)));
  const { llm } = makeClient(fetch, { timeoutSeconds: 30, idleTimeoutSeconds: 0.15 });
  assert.deepEqual(await llm.chat(HELLO), OK_REPLY);
});

/** A body that sends `first`, then a keep-alive comment every `everyMs` until cancelled. */
function pinging(first: string[], everyMs: number): Body {
  let next = 0;
  let cancels = 0;
  // The wait in progress, so a cancel clears its timer (the sanitizer counts it otherwise).
  let waiting: { timer: ReturnType<typeof setTimeout>; resolve: () => void } | undefined;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (next < first.length) return controller.enqueue(encoder.encode(first[next++]));
      await new Promise<void>((resolve) => (waiting = { timer: setTimeout(resolve, everyMs), resolve }));
      if (cancels === 0) controller.enqueue(encoder.encode(": ping\n\n"));
    },
    cancel() {
      cancels++;
      clearTimeout(waiting?.timer);
      waiting?.resolve();
    },
  }, { highWaterMark: 0 });
  return { stream, cancelled: () => cancels };
}

Deno.test("HttpLLM({stream: true}) ends a stream of keep-alive pings at timeoutSeconds, naming the whole-call deadline", async () => {
  const source = pinging(OK_EVENTS.slice(0, 2), 10);
  const { fetch, sent } = stubFetch(sseStep(source));
  const deltas: string[] = [];
  // Each ping restarts the idle deadline; only the whole-call one can end this stream.
  const { llm, delays } = makeClient(fetch, { timeoutSeconds: 0.3, idleTimeoutSeconds: 0.2 });
  const caller = new AbortController();
  const guard = setTimeout(() => caller.abort(new Error("still streaming after 20 s")), 20_000);
  try {
    const error = await llmError(
      llm.chat(HELLO, { signal: caller.signal, onDelta: (text) => deltas.push(text) }),
    );
    assert.equal(caller.signal.aborted, false, "the client ended the stream, not the test's guard");
    assert.equal(error.kind, "timeout");
    assert.equal(error.retries, 0);
    assert.match(
      error.message,
      /^LLM stream from api\.example\.com ran past the 0\.3 s deadline of the whole call after \d+ bytes$/,
    );
  } finally {
    clearTimeout(guard);
  }
  assert.equal(sent.length, 1, "not retried: text was already shown");
  assert.deepEqual(delays, []);
  assert.deepEqual(deltas, ["o"]);
  assert.equal(source.cancelled(), 1);
});

// ---------------------------------------------------------------------------------------------------------
// Failures

Deno.test("HttpLLM({stream: true}) fails with invalid_response when the stream ends without [DONE] or finish_reason", async () => {
  const source = body(OK_EVENTS.slice(0, 3));
  const { fetch, sent } = stubFetch(sseStep(source));
  const deltas: string[] = [];
  const error = await llmError(makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }));
  assert.equal(error.kind, "invalid_response");
  assert.equal(error.retries, 0);
  assert.match(
    error.message,
    /^Invalid LLM response from api\.example\.com: the stream ended after \d+ bytes without \[DONE\] or a finish_reason$/,
  );
  assert.equal(sent.length, 1);
  assert.deepEqual(deltas, ["o", "k"]);
});

Deno.test("HttpLLM({stream: true}) returns the tool calls of a stream cut without [DONE] or finish_reason, finishReason null", async () => {
  const source = body([
    sse(chunk({ role: "assistant", content: "Looking" })),
    sse(
      chunk({
        tool_calls: [{ index: 0, id: "a", type: "function", function: { name: "x", arguments: "" } }],
      }),
    ),
    sse(chunk({ tool_calls: [{ index: 0, function: { arguments: '{"q":' } }] })),
  ]);
  const { fetch, sent } = stubFetch(sseStep(source));
  const deltas: string[] = [];
  const reply = await makeClient(fetch).llm.chat(HELLO, { onDelta: (text) => deltas.push(text) });
  assert.deepEqual(reply, {
    content: "Looking",
    toolCalls: [{ id: "a", name: "x", arguments: '{"q":' }],
    usage: null,
    model: "served-model",
    finishReason: null,
  });
  assert.equal(sent.length, 1);
  assert.deepEqual(deltas, ["Looking"]);
});

Deno.test("HttpLLM({stream: true}) passes on the finish_reason of a stream, length included", async () => {
  const source = body([
    sse(
      chunk({
        tool_calls: [{ index: 0, id: "a", type: "function", function: { name: "x", arguments: "{" } }],
      }),
    ),
    sse(chunk({}, "length"), "[DONE]"),
  ]);
  const { fetch } = stubFetch(sseStep(source));
  const reply = await makeClient(fetch).llm.chat(HELLO);
  assert.deepEqual(reply.toolCalls, [{ id: "a", name: "x", arguments: "{" }]);
  assert.equal(reply.finishReason, "length");
});

Deno.test("HttpLLM({stream: true}) fails with the provider's message on an error chunk, without retry", async () => {
  for (
    const errorEvent of [
      sse({ error: { message: `Upstream overloaded for ${KEY}`, type: "server_error" } }),
      `event: error\ndata: {"error": {"message": "Upstream overloaded for ${KEY}"}}\n\n`,
    ]
  ) {
    const source = body([...OK_EVENTS.slice(0, 2), errorEvent, ...OK_EVENTS.slice(2)]);
    const { fetch, sent } = stubFetch(sseStep(source));
    const error = await llmError(makeClient(fetch).llm.chat(HELLO));
    assert.equal(error.kind, "invalid_response");
    assert.equal(
      error.message,
      "Invalid LLM response from api.example.com: the provider sent an error mid-stream: " +
        "Upstream overloaded for [redacted]",
    );
    assert.equal(sent.length, 1);
    assert.equal(source.cancelled(), 1);
  }
});

Deno.test("HttpLLM({stream: true}) fails with invalid_response on malformed JSON in a data line", async () => {
  const source = body([
    OK_EVENTS[1],
    'data: {"choices": [{"delta": {"content": "x"\n\n',
    ...OK_EVENTS.slice(2),
  ]);
  const { fetch, sent } = stubFetch(sseStep(source));
  const error = await llmError(makeClient(fetch).llm.chat(HELLO));
  assert.equal(error.kind, "invalid_response");
  assert.equal(
    error.message,
    'Invalid LLM response from api.example.com: stream data is not JSON: {"choices": [{"delta": {"content": "x"',
  );
  assert.equal(sent.length, 1);
  assert.equal(source.cancelled(), 1);
});

Deno.test("HttpLLM({stream: true}) retries a 500 and a 429 that come before the body", async () => {
  const { fetch, sent } = stubFetch(
    respond(500, JSON.stringify({ error: { message: "boom" } })),
    respond(429, "slow down", { "Retry-After": "2" }),
    sseStep(() => body(OK_EVENTS)),
  );
  const deltas: string[] = [];
  const { llm, delays } = makeClient(fetch);
  assert.deepEqual(await llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }), {
    ...OK_REPLY,
    retries: 2,
  });
  assert.equal(sent.length, 3);
  assert.deepEqual(delays, [500, 2000]);
  assert.deepEqual(deltas, ["o", "k"], "each piece once");
});

Deno.test("HttpLLM({stream: true}) retries a body that breaks before its first byte", async () => {
  const broken = body([], "error");
  const { fetch, sent } = stubFetch(sseStep(broken), sseStep(() => body(OK_EVENTS)));
  const { llm, delays } = makeClient(fetch);
  assert.deepEqual(await llm.chat(HELLO), { ...OK_REPLY, retries: 1 });
  assert.equal(sent.length, 2);
  assert.deepEqual(delays, [500]);
});

Deno.test("HttpLLM({stream: true}) retries when the first byte does not come within timeoutSeconds", async () => {
  const silent = body([], "stall");
  const { fetch, sent } = stubFetch(sseStep(silent), sseStep(() => body(OK_EVENTS)));
  const { llm, delays } = makeClient(fetch, { timeoutSeconds: 0.05 });
  assert.deepEqual(await llm.chat(HELLO), { ...OK_REPLY, retries: 1 });
  assert.equal(sent.length, 2);
  assert.equal(sent[0].signal.aborted, true, "the first attempt was cut off");
  assert.deepEqual(delays, [500]);
  assert.equal(silent.cancelled(), 1);
});

Deno.test("HttpLLM({stream: true}) fails without retry when the stream breaks after deltas", async () => {
  const { fetch, sent } = stubFetch(sseStep(() => body(OK_EVENTS.slice(1, 3), "error")));
  const deltas: string[] = [];
  const { llm, delays } = makeClient(fetch);
  const error = await llmError(llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }));
  assert.equal(error.kind, "network");
  assert.equal(error.retries, 0);
  assert.match(
    error.message,
    /^LLM stream from api\.example\.com broke after \d+ bytes: connection reset by peer$/,
  );
  assert.equal(sent.length, 1, "not retried: the text was already shown");
  assert.deepEqual(delays, []);
  assert.deepEqual(deltas, ["o", "k"]);
});

Deno.test("HttpLLM({stream: true}) fails with timeout, without retry, when the stream stalls", async () => {
  const cases: [Partial<HttpLLMOptions>, RegExp][] = [
    [
      { timeoutSeconds: 5, idleTimeoutSeconds: 0.05 },
      /^LLM stream from api\.example\.com stalled: no data for 0\.05 s after \d+ bytes$/,
    ],
    // The idle deadline defaults to the whole one, which was armed first and passes first.
    [
      { timeoutSeconds: 0.05 },
      /^LLM stream from api\.example\.com ran past the 0\.05 s deadline of the whole call after \d+ bytes$/,
    ],
  ];
  for (const [options, message] of cases) {
    const source = body(OK_EVENTS.slice(0, 2), "stall");
    const { fetch, sent } = stubFetch(sseStep(source));
    const deltas: string[] = [];
    // The message names the deadline that ended the stream: the idle one, not the whole call's 5 s.
    const error = await llmError(
      makeClient(fetch, options).llm.chat(HELLO, { onDelta: (t) => deltas.push(t) }),
    );
    assert.equal(error.kind, "timeout");
    assert.equal(error.retries, 0);
    assert.match(error.message, message);
    assert.equal(sent.length, 1);
    assert.deepEqual(deltas, ["o"]);
    assert.equal(source.cancelled(), 1);
  }
});

Deno.test("HttpLLM({stream: true}) hangs up on a real loopback server whose stream stalls", async () => {
  let source: Body | undefined;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    await request.body?.cancel();
    source = body(OK_EVENTS.slice(0, 2), "stall");
    return new Response(source.stream, { headers: { "content-type": "text/event-stream" } });
  });
  try {
    const llm = new HttpLLM({
      baseUrl: `http://127.0.0.1:${server.addr.port}/v1`,
      model: MODEL,
      stream: true,
      idleTimeoutSeconds: 0.1,
    });
    const deltas: string[] = [];
    const error = await llmError(llm.chat(HELLO, { onDelta: (text) => deltas.push(text) }));
    assert.equal(error.kind, "timeout");
    assert.equal(error.retries, 0);
    assert.deepEqual(deltas, ["o"]);
  } finally {
    await server.shutdown();
  }
  assert.equal(source?.cancelled(), 1, "the server saw the client hang up");
});

Deno.test("HttpLLM({stream: true}) fails with aborted when the caller aborts mid-stream", async () => {
  const controller = new AbortController();
  const source = body(OK_EVENTS.slice(0, 3), "stall");
  const { fetch, sent } = stubFetch(sseStep(source));
  const deltas: string[] = [];
  const { llm, delays } = makeClient(fetch);
  const error = await llmError(llm.chat(HELLO, {
    signal: controller.signal,
    onDelta(text) {
      deltas.push(text);
      if (text === "k") setTimeout(() => controller.abort(), 10);
    },
  }));
  assert.equal(error.kind, "aborted");
  assert.equal(error.message, "LLM request was aborted");
  assert.equal(sent.length, 1);
  assert.deepEqual(delays, []);
  assert.deepEqual(deltas, ["o", "k"]);
  assert.equal(source.cancelled(), 1);
});

Deno.test("HttpLLM({stream: true}) stops handing out text once the caller aborted", async () => {
  const controller = new AbortController();
  const { fetch } = stubFetch(sseStep(() => body([OK_EVENTS.join("")])));
  const deltas: string[] = [];
  const error = await llmError(
    makeClient(fetch).llm.chat(HELLO, {
      signal: controller.signal,
      onDelta(text) {
        deltas.push(text);
        controller.abort();
      },
    }),
  );
  assert.equal(error.kind, "aborted");
  assert.deepEqual(deltas, ["o"]);
});

Deno.test("HttpLLM({stream: true}) lets an onDelta exception through, once, and frees the body", async () => {
  const source = body(OK_EVENTS);
  const { fetch, sent } = stubFetch(sseStep(source));
  const bug = new RangeError("renderer broke");
  await assert.rejects(
    makeClient(fetch).llm.chat(HELLO, {
      onDelta() {
        throw bug;
      },
    }),
    (error) => error === bug,
  );
  assert.equal(sent.length, 1);
  assert.equal(source.cancelled(), 1);
});

// ---------------------------------------------------------------------------------------------------------
// ReplyAssembler

function assemble(chunks: unknown[], options = {}): { reply: ChatReply; pieces: string[] } {
  const assembler = new ReplyAssembler({ model: MODEL, source: "host.test", ...options });
  const pieces = chunks.map((item) => assembler.add({ event: null, data: JSON.stringify(item) }));
  return { reply: assembler.reply(), pieces: pieces.filter((piece) => piece !== "") };
}

function assembleError(chunks: unknown[]): LlmError {
  try {
    assemble(chunks);
  } catch (error) {
    assert.ok(error instanceof LlmError);
    assert.equal(error.kind, "invalid_response");
    return error;
  }
  assert.fail("expected the assembly to fail");
}

const call = (index: number, fields: Record<string, unknown>) =>
  chunk({ tool_calls: [{ index, ...fields }] });

Deno.test("ReplyAssembler merges interleaved tool-call fragments by index", () => {
  const { reply } = assemble([
    call(0, { id: "a", type: "function", function: { name: "calculator", arguments: "" } }),
    call(1, { id: "b", type: "function", function: { name: "search", arguments: '{"q' } }),
    call(0, { function: { arguments: '{"expression":' } }),
    call(1, { function: { arguments: '":"x"}' } }),
    call(0, { function: { arguments: '"1+1"}' } }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "calculator", arguments: '{"expression":"1+1"}' },
    { id: "b", name: "search", arguments: '{"q":"x"}' },
  ]);
  assert.equal(reply.content, null);
});

Deno.test("ReplyAssembler keeps the first id and name, orders calls by index and fills missing arguments", () => {
  const { reply } = assemble([
    call(2, { id: "c", function: { name: "late" } }),
    call(0, { id: "a", function: { name: "early", arguments: "{}" } }),
    call(0, { id: "a", function: { name: "early", arguments: "" } }),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "early", arguments: "{}" },
    { id: "c", name: "late", arguments: "{}" },
  ]);
});

Deno.test("ReplyAssembler follows calls without index by their id", () => {
  const { reply } = assemble([
    chunk({ tool_calls: [{ id: "a", function: { name: "one", arguments: '{"x":' } }] }),
    chunk({ tool_calls: [{ function: { arguments: "1}" } }] }),
    chunk({ tool_calls: [{ id: "b", function: { name: "two", arguments: "{}" } }] }),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "one", arguments: '{"x":1}' },
    { id: "b", name: "two", arguments: "{}" },
  ]);
});

Deno.test("ReplyAssembler continues calls listed in one delta without index by their position", () => {
  const { reply } = assemble([
    chunk({
      tool_calls: [
        { id: "a", type: "function", function: { name: "x", arguments: "" } },
        { id: "b", type: "function", function: { name: "y", arguments: "" } },
      ],
    }),
    chunk({ tool_calls: [{ function: { arguments: '{"q":' } }, { function: { arguments: '{"r":' } }] }),
    chunk({
      tool_calls: [{ index: 0, function: { arguments: "1}" } }, { index: 1, function: { arguments: "2}" } }],
    }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "x", arguments: '{"q":1}' },
    { id: "b", name: "y", arguments: '{"r":2}' },
  ]);
});

Deno.test("ReplyAssembler continues calls listed without index when later deltas repeat their ids", () => {
  const { reply } = assemble([
    chunk({ tool_calls: [{ id: "a", function: { name: "x" } }, { id: "b", function: { name: "y" } }] }),
    chunk({
      tool_calls: [
        { id: "a", function: { arguments: '{"q":' } },
        { id: "b", function: { name: "y", arguments: '{"r":' } },
      ],
    }),
    chunk({ tool_calls: [{ function: { arguments: "1}" } }, { id: "b", function: { arguments: "2}" } }] }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "x", arguments: '{"q":1}' },
    { id: "b", name: "y", arguments: '{"r":2}' },
  ]);
});

Deno.test("ReplyAssembler starts a new call for a positional fragment with another id", () => {
  const { reply } = assemble([
    chunk({
      tool_calls: [{ id: "a", function: { name: "x", arguments: "" } }, { id: "b", function: { name: "y" } }],
    }),
    chunk({ tool_calls: [{ function: { arguments: "{}" } }, { function: { arguments: "{}" } }] }),
    chunk({ tool_calls: [{ id: "c", function: { name: "z", arguments: '{"s":' } }] }),
    chunk({ tool_calls: [{ function: { arguments: "3}" } }] }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "x", arguments: "{}" },
    { id: "b", name: "y", arguments: "{}" },
    { id: "c", name: "z", arguments: '{"s":3}' },
  ]);
});

Deno.test("ReplyAssembler still follows one call at a time without index, each started with an id", () => {
  const { reply } = assemble([
    chunk({ tool_calls: [{ id: "a", function: { name: "x", arguments: "" } }] }),
    chunk({ tool_calls: [{ function: { arguments: '{"q":' } }] }),
    chunk({ tool_calls: [{ function: { arguments: "1}" } }] }),
    chunk({ tool_calls: [{ id: "b", function: { name: "y", arguments: "" } }] }),
    chunk({ tool_calls: [{ function: { arguments: '{"r":2}' } }] }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "a", name: "x", arguments: '{"q":1}' },
    { id: "b", name: "y", arguments: '{"r":2}' },
  ]);
});

Deno.test("ReplyAssembler drops reasoning, unknown fields and null usage, and keeps the last usage", () => {
  const { reply, pieces } = assemble([
    chunk({ role: "assistant", content: null, reasoning_content: "SECRET" }, null, { usage: null }),
    chunk({ content: "A", reasoning_content: null }, null, { obfuscation: "xx", service_tier: "default" }),
    chunk({ content: "B", refusal: null }, "stop", {
      usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
      system_fingerprint: null,
    }),
    { ...USAGE_CHUNK, usage: null },
  ]);
  assert.deepEqual(pieces, ["A", "B"]);
  assert.deepEqual(reply, {
    content: "AB",
    toolCalls: [],
    usage: { promptTokens: 1, completionTokens: 2, totalTokens: 3, cachedTokens: null },
    model: "served-model",
  });
  assert.ok(!JSON.stringify(reply).includes("SECRET"));
});

Deno.test("ReplyAssembler names the model of the chunks, else the one asked for", () => {
  const { model: _, ...nameless } = chunk({ content: "x" });
  assert.equal(assemble([nameless]).reply.model, MODEL);
  assert.equal(assemble([nameless, chunk({})]).reply.model, "served-model");
});

Deno.test("ReplyAssembler turns an empty text beside tool calls into null, like the non-streaming body", () => {
  const { reply } = assemble([
    chunk({ content: "" }),
    call(0, { id: "a", function: { name: "x", arguments: "{}" } }),
    chunk({ content: "" }, "tool_calls"),
  ]);
  assert.equal(reply.content, null);
  assert.equal(assemble([chunk({ content: "" }, "stop")]).reply.content, "");
  assert.equal(assemble([chunk({ role: "assistant" }, "stop")]).reply.content, null);
});

Deno.test("ReplyAssembler is complete after [DONE] or a finish_reason, and reads nothing after [DONE]", () => {
  const assembler = new ReplyAssembler();
  assembler.add({ event: null, data: JSON.stringify(chunk({ content: "x" })) });
  assert.equal(assembler.complete, false);
  assembler.add({ event: null, data: JSON.stringify(chunk({}, "length")) });
  assert.equal(assembler.finishReason, "length");
  assert.equal(assembler.complete, true);
  assert.equal(assembler.done, false);
  assert.equal(assembler.add({ event: null, data: " [DONE] " }), "");
  assert.equal(assembler.done, true);
  assert.equal(assembler.add({ event: null, data: JSON.stringify(chunk({ content: "y" })) }), "");
  assert.equal(assembler.reply().content, "x");
});

Deno.test("ReplyAssembler rejects chunks of the wrong shape", () => {
  const cases: [unknown[], string][] = [
    [[[1, 2]], "stream chunk is not a JSON object"],
    [[{ choices: {} }], 'stream chunk "choices" is not an array'],
    [[chunk({ content: 42 })], "choices[0].delta.content is neither a string nor null"],
    [[chunk({ tool_calls: {} })], "choices[0].delta.tool_calls is not an array"],
    [[call(-1, { id: "a" })], "choices[0].delta.tool_calls[] index is not a whole number: -1"],
    [[USAGE_CHUNK], 'the stream carried no "choices"'],
  ];
  for (const [chunks, reason] of cases) {
    assert.equal(assembleError(chunks).message, `Invalid LLM response from host.test: ${reason}`, reason);
  }
});

Deno.test("ReplyAssembler keeps a call without name or with arguments of the wrong type as a call with a problem", () => {
  const { reply } = assemble([
    call(0, { function: { name: "x", arguments: "{}" } }),
    call(1, { id: "b", function: { arguments: '{"q":' } }),
    call(1, { function: { arguments: "1}" } }),
    call(2, { id: "c", function: { name: "calculator", arguments: 7 } }),
    call(2, { function: { arguments: "{}" } }),
    call(3, { id: "d", function: { name: "calculator", arguments: { expression: "2+2" } } }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(reply.toolCalls, [
    { id: "", name: "x", arguments: "{}" },
    { id: "b", name: "invalid_tool_call", arguments: '{"q":1}', problem: "it has no function name" },
    {
      id: "c",
      name: "calculator",
      arguments: "{}",
      problem: "its arguments must be a JSON string or object, got number",
    },
    { id: "d", name: "calculator", arguments: '{"expression":"2+2"}' },
  ]);
});
