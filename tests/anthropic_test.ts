/**
 * The Messages dialect (`LLM_API=anthropic`) against a fake that enforces Anthropic's rules: the request's
 * shape (system blocks, tools, one user message of results per step, breakpoints), every reply shape streamed
 * and whole (text, tool use, parallel tool use, thinking with its signature, cached usage, refusal,
 * max_tokens, overloaded), thinking sent back unchanged to Claude only and never traced, retries.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { HttpLLM, type HttpLLMOptions } from "../src/llm/client.ts";
import { ANSWER_TOOL, hasStructuredOutputs, outputSchema } from "../src/llm/anthropic.ts";
import type { Message, ResponseFormat, ToolSchema } from "../src/types.ts";
import { harness } from "./_harness.ts";
import { llmError, recordingSleep } from "./_openai_stubs.ts";
import { ANTHROPIC_KEY, type AnthropicProvider, anthropicProvider } from "./_anthropic_fake.ts";
import { THOUGHT } from "./_thinking_providers.ts";

const MODEL = "claude-sonnet-4-5";

function client(provider: AnthropicProvider, stream: boolean, options: Partial<HttpLLMOptions> = {}) {
  const { sleep, delays } = recordingSleep();
  const llm = new HttpLLM({
    api: "anthropic",
    baseUrl: provider.baseUrl,
    apiKey: ANTHROPIC_KEY,
    model: MODEL,
    stream,
    retries: 2,
    fetch: provider.fetch,
    sleep,
    ...options,
  });
  return { llm, delays };
}

const CALCULATOR: ToolSchema = Object.freeze({
  name: "calculator",
  description: "Evaluates arithmetic.",
  parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
});

/** A long system prompt, so that the prefix passes the fake's minimum cacheable length. */
const SYSTEM = `You are a careful assistant. ${"Rules of the house. ".repeat(300)}`;

/** A session with a summary, an earlier tool turn and recalled memory before the new question. */
const HISTORY: Message[] = [
  { role: "system", content: SYSTEM },
  { role: "system", content: "[RUNTIME CONTEXT]\nSummary of earlier turns: the user likes sums." },
  { role: "user", content: "what is 6*7 and 2+3?" },
  {
    role: "assistant",
    content: null,
    toolCalls: [
      { id: "toolu_1", name: "calculator", arguments: '{"expression":"6*7"}' },
      { id: "run:1:0", name: "calculator", arguments: '{"expression":"2+"}' },
    ],
  },
  {
    role: "tool",
    toolCallId: "toolu_1",
    content: '{"ok":true,"data":{"result":42},"error":null,"truncated":false}',
  },
  {
    role: "tool",
    toolCallId: "run:1:0",
    content: '{"ok":false,"data":null,"error":"bad","truncated":false}',
  },
  { role: "assistant", content: "42, and the second failed." },
  { role: "system", content: "[RUNTIME CONTEXT]\nRecalled: the user's name is Ada." },
  { role: "user", content: "thanks, what else?" },
];

function marks(body: Record<string, unknown>): string[] {
  const found: string[] = [];
  for (const [i, block] of ((body.system ?? []) as Record<string, unknown>[]).entries()) {
    if (block.cache_control !== undefined) found.push(`system.${i}`);
  }
  for (const [i, message] of (body.messages as { content: Record<string, unknown>[] }[]).entries()) {
    for (const [j, block] of message.content.entries()) {
      if (block.cache_control !== undefined) found.push(`messages.${i}.${j}`);
    }
  }
  return found;
}

Deno.test("HttpLLM({api: 'anthropic'}) sends system blocks, tools, one user message of results per step and 4 breakpoints where the prefix is stable", async () => {
  const provider = anthropicProvider();
  const { llm } = client(provider, false);
  const reply = await llm.chat(HISTORY, { tools: [CALCULATOR] });
  assert.deepEqual(provider.refused, []);
  assert.equal(
    reply.content,
    "echo: [RUNTIME CONTEXT]\nRecalled: the user's name is Ada. thanks, what else?",
  );
  const [body] = provider.requests;
  const sent = provider.headers[0];
  assert.equal(sent.get("x-api-key"), ANTHROPIC_KEY);
  assert.equal(sent.get("anthropic-version"), "2023-06-01");
  assert.equal(sent.get("authorization"), null);
  assert.equal(body.model, MODEL);
  assert.equal(body.max_tokens, 8192);
  assert.deepEqual(body.tools, [{
    name: "calculator",
    description: CALCULATOR.description,
    input_schema: CALCULATOR.parameters,
  }]);
  const messages = body.messages as { role: string; content: Record<string, unknown>[] }[];
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "user", "assistant", "user"]);
  // The step's two results are one user message, in order, the failed one marked, ids the API accepts.
  assert.deepEqual(messages[2].content.map((b) => [b.type, b.tool_use_id, b.is_error]), [
    ["tool_result", "toolu_1", undefined],
    ["tool_result", "run_1_0", true],
  ]);
  assert.equal(messages[1].content[1].id, "run_1_0");
  assert.deepEqual(messages[1].content[0].input, { expression: "6*7" });
  // Tools and system prompt, the summary, the previous turn's last message, the request's last message.
  assert.deepEqual(marks(body), ["system.0", "system.1", "messages.3.0", "messages.4.1"]);
  assert.equal(reply.finishReason, "stop");
});

Deno.test("the fake refuses in Anthropic's words a result without its call, more than 4 breakpoints, and a missing key", async () => {
  const provider = anthropicProvider();
  const send = (body: unknown, key = ANTHROPIC_KEY) =>
    provider.fetch(`${provider.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01" },
      body: JSON.stringify(body),
    }).then(async (r) => [r.status, (await r.json()).error.message]);
  const result = { type: "tool_result", tool_use_id: "toolu_x", content: "1" };
  assert.deepEqual(
    await send({ model: MODEL, max_tokens: 10, messages: [{ role: "user", content: [result] }] }),
    [
      400,
      "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
    ],
  );
  const marked = { type: "text", text: "x", cache_control: { type: "ephemeral" } };
  const five = { model: MODEL, max_tokens: 10, messages: [{ role: "user", content: Array(5).fill(marked) }] };
  assert.deepEqual(await send(five), [
    400,
    "A maximum of 4 blocks with cache_control may be provided. Found 5.",
  ]);
  assert.deepEqual(await send({ model: MODEL, messages: [] }), [400, "max_tokens: Field required"]);
  assert.deepEqual(await send({}, "wrong"), [401, "invalid x-api-key"]);
});

for (const stream of [false, true]) {
  const mode = stream ? "streamed" : "whole";

  Deno.test(`Messages (${mode}): a text answer with usage as the prompt's uncached, written and read tokens, and the cache read on the next request`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream);
    const deltas: string[] = [];
    const ask: Message[] = [{ role: "system", content: SYSTEM }, { role: "user", content: "hello there" }];
    const first = await llm.chat(ask, { onDelta: (text) => deltas.push(text) });
    assert.equal(first.content, "echo: hello there");
    if (stream) assert.deepEqual(deltas, ["echo: ", "hello ", "there"]);
    assert.equal(first.model, MODEL);
    assert.equal(first.finishReason, "stop");
    const usage = first.usage!;
    assert.equal(usage.cachedTokens, 0);
    assert.ok(usage.cacheWriteTokens! > 1024, JSON.stringify(usage));
    assert.equal(usage.totalTokens, usage.promptTokens! + usage.completionTokens!);
    const second = await llm.chat([...ask, { role: "assistant", content: first.content }, {
      role: "user",
      content: "again",
    }]);
    // The system prompt and the first exchange were written by the first request: read now.
    assert.ok(second.usage!.cachedTokens! >= usage.cacheWriteTokens!, JSON.stringify(second.usage));
    assert.ok(second.usage!.promptTokens! > second.usage!.cachedTokens!);
  });

  Deno.test(`Messages (${mode}): parallel tool use comes back as calls in order, with their arguments`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream);
    const reply = await llm.chat([{ role: "user", content: "what is 6*7 and 2+3?" }], {
      tools: [CALCULATOR],
    });
    assert.equal(reply.content, null);
    assert.equal(reply.finishReason, "tool_calls");
    assert.deepEqual(reply.toolCalls.map((c) => [c.name, JSON.parse(c.arguments)]), [
      ["calculator", { expression: "6*7" }],
      ["calculator", { expression: "2+3" }],
    ]);
    assert.ok(reply.toolCalls.every((c) => c.id.startsWith("toolu_")));
  });

  Deno.test(`Messages (${mode}): refusal, max_tokens and pause_turn map to the loop's finish reasons`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream);
    const ask: Message[] = [{ role: "user", content: "what is 6*7?" }];
    const cases = [["refusal", "content_filter"], ["max_tokens", "length"], ["pause_turn", "length"]];
    for (const [stop, expected] of cases) {
      provider.script.push({ message: { stop_reason: stop } });
      assert.equal((await llm.chat(ask, { tools: [CALCULATOR] })).finishReason, expected, stop);
    }
  });

  Deno.test(`Messages (${mode}): overloaded (529) and a rate limit (429) are retried after retry-after, or after the rate limit's reset`, async () => {
    const provider = anthropicProvider();
    const now = () => Date.parse("2026-12-07T10:00:00Z");
    const { llm, delays } = client(provider, stream, { now });
    provider.script.push(
      {
        status: 529,
        error: { type: "overloaded_error", message: "Overloaded" },
        headers: { "retry-after": "3" },
      },
      {
        status: 429,
        error: { type: "rate_limit_error", message: "Number of request tokens has exceeded your rate limit" },
        headers: {
          "anthropic-ratelimit-tokens-remaining": "0",
          "anthropic-ratelimit-tokens-reset": "2026-12-07T10:00:07Z",
          "anthropic-ratelimit-requests-remaining": "40",
          "anthropic-ratelimit-requests-reset": "2026-12-07T10:00:01Z",
        },
      },
    );
    const reply = await llm.chat([{ role: "user", content: "hi" }]);
    assert.equal(reply.content, "echo: hi");
    assert.equal(reply.retries, 2);
    assert.deepEqual(delays, [3000, 7000]);
  });

  Deno.test(`Messages (${mode}): a refused key fails at once, naming Anthropic's reason and never the key`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream, { apiKey: "sk-ant-WRONG-KEY-789" });
    const error = await llmError(llm.chat([{ role: "user", content: "hi" }]));
    assert.equal(error.status, 401);
    assert.match(error.message, /HTTP 401 from api\.anthropic\.example: invalid x-api-key/);
    assert.ok(!error.message.includes("WRONG-KEY"));
  });

  Deno.test(`Messages (${mode}): a structured answer is asked as a tool the model must call, and comes back as the answer's JSON`, async () => {
    const provider = anthropicProvider();
    // Before 4.5, Claude has no structured outputs.
    const { llm } = client(provider, stream, { model: "claude-sonnet-4-20250514" });
    const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
    const reply = await llm.chat([{ role: "user", content: "say yes" }], {
      responseFormat: { type: "json_schema", name: "yes", schema },
    });
    assert.deepEqual(JSON.parse(reply.content!), { answer: "say yes" });
    assert.deepEqual(reply.toolCalls, []);
    assert.equal(reply.finishReason, "stop");
    const body = provider.requests[0];
    assert.deepEqual(body.tool_choice, { type: "any" });
    assert.equal((body.tools as { name: string }[])[0].name, ANSWER_TOOL);
    assert.equal(body.output_config, undefined);
  });

  Deno.test(`Messages (${mode}): a model with structured outputs gets the schema as output_config.format, objects closed and constraints left to the runtime`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream);
    const schema = {
      type: "object",
      properties: {
        answer: { type: "string", minLength: 1 },
        tags: {
          type: "array",
          items: { type: "object", properties: { n: { type: "integer", minimum: 0 } } },
        },
      },
      required: ["answer"],
    };
    const reply = await llm.chat([{ role: "user", content: "say yes" }], {
      tools: [CALCULATOR],
      responseFormat: { type: "json_schema", name: "yes", schema },
    });
    assert.deepEqual(provider.refused, []);
    assert.deepEqual(JSON.parse(reply.content!), { answer: "say yes" });
    const body = provider.requests[0];
    assert.deepEqual(body.output_config, {
      format: {
        type: "json_schema",
        schema: {
          type: "object",
          properties: {
            answer: { type: "string" },
            tags: {
              type: "array",
              items: { type: "object", properties: { n: { type: "integer" } }, additionalProperties: false },
            },
          },
          required: ["answer"],
          additionalProperties: false,
        },
      },
    });
    assert.deepEqual((body.tools as { name: string }[]).map((t) => t.name), ["calculator"], "no answer tool");
    assert.equal(body.tool_choice, undefined);
    assert.deepEqual(
      schema.properties.answer,
      { type: "string", minLength: 1 },
      "the caller's schema untouched",
    );
  });
  Deno.test(`Messages (${mode}): with thinking, a tool turn sends the signed thinking back unchanged, a later turn too, and no thought reaches the trace or the answer`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream, { thinkingBudget: 2048 });
    using h = harness([]);
    const agent = { ...h.agent, llm };
    const deltas: string[] = [];
    const run = { ...h.run, onDelta: (text: string) => deltas.push(text) };
    const first = await runTurn({ sessionId: "s", userId: "u", message: "what is 6*7 and 2+3?" }, agent, run);
    assert.equal(first.outcome, "answered", JSON.stringify(first.failure));
    assert.equal(first.answer, "The answer is 42 and 5.");
    const second = await runTurn({ sessionId: "s", userId: "u", message: "and 9-4?" }, agent, run);
    assert.equal(second.outcome, "answered", JSON.stringify(second.failure));
    assert.deepEqual(provider.refused, []);
    const body = provider.requests[1];
    assert.deepEqual(body.thinking, { type: "enabled", budget_tokens: 2048 });
    assert.equal(body.max_tokens, 8192 + 2048);
    const asked = (body.messages as { content: Record<string, unknown>[] }[])[1].content;
    assert.deepEqual(asked.map((b) => b.type), ["thinking", "tool_use", "tool_use"]);
    assert.ok(String(asked[0].thinking).includes(THOUGHT));
    for (const [where, value] of Object.entries({ events: h.events, deltas, first, second })) {
      assert.ok(!JSON.stringify(value).includes(THOUGHT), `no thinking in ${where}`);
    }
  });

  Deno.test(`Messages (${mode}): thinking dropped or sent to another model is refused or left out, never sent where it did not come from`, async () => {
    const provider = anthropicProvider();
    const { llm } = client(provider, stream, { thinkingBudget: 2048 });
    const ask: Message[] = [{ role: "user", content: "what is 6*7?" }];
    const reply = await llm.chat(ask, { tools: [CALCULATOR] });
    assert.ok(reply.providerState !== undefined);
    const results: Message[] = reply.toolCalls.map((c) => ({
      role: "tool",
      toolCallId: c.id,
      content: '{"ok":true,"data":{"result":42}}',
    }));
    const asked: Message = { role: "assistant", content: reply.content, toolCalls: reply.toolCalls };
    const dropped = await llmError(llm.chat([...ask, asked, ...results]));
    assert.equal(dropped.status, 400);
    assert.match(dropped.message, /a final `assistant` message must start with a thinking block/);
    const right = await llm.chat([...ask, { ...asked, providerState: reply.providerState }, ...results]);
    assert.equal(right.content, "The answer is 42.");
    // Another model of the same provider is not sent the state (and refuses the call for want of it).
    const { llm: other } = client(provider, stream, { thinkingBudget: 2048, model: "claude-opus-4-1" });
    const elsewhere = await llmError(
      other.chat([...ask, { ...asked, providerState: reply.providerState }, ...results]),
    );
    assert.match(elsewhere.message, /must start with a thinking block/);
    assert.ok(!JSON.stringify(provider.requests.at(-1)).includes(THOUGHT));
  });
}

Deno.test("Messages (streamed): an overloaded error event before any text is retried; the reply comes whole", async () => {
  const provider = anthropicProvider();
  const { llm, delays } = client(provider, true);
  provider.script.push({ streamError: { type: "overloaded_error", message: "Overloaded" } });
  const reply = await llm.chat([{ role: "user", content: "hi" }]);
  assert.equal(reply.content, "echo: hi");
  assert.equal(reply.retries, 1);
  assert.equal(delays.length, 1);
});

Deno.test("Messages: a schema structured outputs cannot take (an open object, a $ref) or a bare JSON object goes through the answer tool", async () => {
  const open = { type: "object", properties: { a: { type: "string" } }, additionalProperties: true };
  const recursive = { type: "object", properties: { next: { $ref: "#" } } };
  const formats: ResponseFormat[] = [
    { type: "json_schema", name: "open", schema: open },
    { type: "json_schema", name: "tree", schema: recursive },
    { type: "json_object" },
  ];
  for (const responseFormat of formats) {
    const provider = anthropicProvider();
    const { llm } = client(provider, false);
    const reply = await llm.chat([{ role: "user", content: "say yes" }], { responseFormat });
    assert.deepEqual(JSON.parse(reply.content!), { answer: "say yes" });
    const body = provider.requests[0];
    assert.equal(body.output_config, undefined, JSON.stringify(responseFormat));
    assert.equal((body.tools as { name: string }[])[0].name, ANSWER_TOOL);
  }
  assert.equal(outputSchema(open), null);
  assert.equal(outputSchema(recursive), null);
});

Deno.test("hasStructuredOutputs() knows Claude 4.5 and later by the model id, dated, aliased or on Bedrock", () => {
  const yes = [
    "claude-sonnet-4-5",
    "claude-sonnet-4-5-20250929",
    "claude-opus-4-6",
    "claude-haiku-4-5@20251001",
  ];
  const more = ["anthropic.claude-opus-4-5-20251101-v1:0", "claude-sonnet-5", "claude-opus-4-10"];
  const no = ["claude-sonnet-4-20250514", "claude-opus-4-1-20250805", "claude-3-5-haiku-latest", "gpt-5"];
  assert.deepEqual([...yes, ...more].filter((m) => !hasStructuredOutputs(m)), []);
  assert.deepEqual(no.filter(hasStructuredOutputs), []);
});

Deno.test("the fake refuses an output format for a model without structured outputs, and an open object, in Anthropic's words", async () => {
  for (
    const [model, schema, said] of [
      [
        "claude-sonnet-4-20250514",
        { type: "object", additionalProperties: false },
        /not supported for model/,
      ],
      ["claude-sonnet-4-5", { type: "object" }, /'additionalProperties' must be explicitly set to false/],
    ] as const
  ) {
    const provider = anthropicProvider();
    const response = await provider.fetch(`${provider.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({
        model,
        max_tokens: 64,
        messages: [{ role: "user", content: "hi" }],
        output_config: { format: { type: "json_schema", schema } },
      }),
    });
    assert.equal(response.status, 400);
    const body = await response.json();
    assert.equal(body.error.type, "invalid_request_error");
    assert.match(body.error.message, said);
  }
});

Deno.test("Messages: a structured answer with thinking leaves the tool choice to the model, which thinking requires", async () => {
  const provider = anthropicProvider();
  const { llm } = client(provider, false, { thinkingBudget: 1024 });
  const reply = await llm.chat([{ role: "user", content: "say yes" }], {
    responseFormat: { type: "json_object" },
  });
  assert.deepEqual(JSON.parse(reply.content!), { answer: "say yes" });
  assert.equal(provider.requests[0].tool_choice, undefined);
  assert.deepEqual(provider.refused, []);
});
