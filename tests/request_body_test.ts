import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import { buildContext } from "../src/agent/context.ts";
import { buildRequestBody, serializeRequestBody } from "../src/llm/client.ts";
import { type Message, REASONING_EFFORTS, type ResponseFormat, type ToolSchema } from "../src/types.ts";

/** A message frozen with its tool calls, as the store and the loop hand them out. */
function freezeMessage<T extends Message>(message: T): T {
  if (message.toolCalls !== undefined) {
    Object.freeze(message.toolCalls).forEach((call) => Object.freeze(call));
  }
  return Object.freeze(message);
}

const TOOLS: readonly ToolSchema[] = Object.freeze([
  Object.freeze({
    name: "calculator",
    description: "Evaluates arithmetic.",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  }),
]);

const FORMATS: (ResponseFormat | null)[] = [
  null,
  { type: "json_object" },
  { type: "json_schema", name: "answer", schema: { type: "object", required: ["n"] }, strict: false },
];

const TEXT = fc.string({ unit: "grapheme", maxLength: 40 });

const MESSAGE: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constantFrom("user" as const, "system" as const, "runtime" as const), content: TEXT }),
  fc.record({ role: fc.constant("assistant" as const), content: fc.option(TEXT) }),
  fc.record({
    role: fc.constant("assistant" as const),
    content: fc.option(TEXT),
    toolCalls: fc.array(fc.record({ id: TEXT, name: TEXT, arguments: TEXT }), { maxLength: 3 }),
  }),
  fc.record({
    role: fc.constant("tool" as const),
    content: fc.option(TEXT),
    toolCallId: TEXT.filter((s) => s !== ""),
  }),
);

Deno.test("serializeRequestBody() is byte-identical to JSON.stringify(buildRequestBody()), frozen or not, again and again", () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(MESSAGE, fc.boolean()), { maxLength: 12 }),
      fc.boolean(),
      fc.boolean(),
      fc.constantFrom(...FORMATS),
      fc.constantFrom(null, ...REASONING_EFFORTS),
      (drawn, withTools, stream, responseFormat, reasoningEffort) => {
        const messages = drawn.map(([m, frozen]) => frozen ? freezeMessage(structuredClone(m)) : m);
        const tools = withTools ? TOOLS : [];
        const built = buildRequestBody("gpt-test", messages, tools, { responseFormat, reasoningEffort });
        const expected: Record<string, unknown> = { ...built };
        if (stream) Object.assign(expected, { stream: true, stream_options: { include_usage: true } });
        const options = { stream, responseFormat, reasoningEffort };
        const first = serializeRequestBody("gpt-test", messages, tools, options);
        assert.equal(first, JSON.stringify(expected));
        // The second time the frozen parts come from the cache.
        assert.equal(serializeRequestBody("gpt-test", messages, tools, options), first);
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("serializeRequestBody() stays byte-identical when each request starts with the one before's messages", () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(MESSAGE, fc.boolean()), { maxLength: 8 }),
      fc.array(fc.tuple(fc.nat(8), fc.array(fc.tuple(MESSAGE, fc.boolean()), { maxLength: 4 })), {
        maxLength: 5,
      }),
      TEXT,
      (first, steps, changed) => {
        let messages = first.map(([m, frozen]) => frozen ? freezeMessage(structuredClone(m)) : m);
        const check = () =>
          assert.equal(
            serializeRequestBody("m", messages, TOOLS, { origin: "o" }),
            JSON.stringify(buildRequestBody("m", messages, TOOLS, { origin: "o" })),
          );
        check();
        for (const [keep, added] of steps) {
          // The next request keeps a prefix of the same objects, then others; an unfrozen one may change.
          const more = added.map(([m, frozen]) => frozen ? freezeMessage(structuredClone(m)) : m);
          messages = [...messages.slice(0, keep), ...more];
          const open = messages.find((m) => !Object.isFrozen(m));
          if (open !== undefined) open.content = changed;
          check();
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("serializeRequestBody() puts reasoning_effort after response_format and before stream, only when set", () => {
  const format: ResponseFormat = { type: "json_object" };
  assert.equal(
    serializeRequestBody("m", [], [], { responseFormat: format, reasoningEffort: "high", stream: true }),
    '{"model":"m","messages":[],"response_format":{"type":"json_object"},"reasoning_effort":"high",' +
      '"stream":true,"stream_options":{"include_usage":true}}',
  );
  assert.equal(serializeRequestBody("m", [], [], { reasoningEffort: null }), '{"model":"m","messages":[]}');
  assert.equal(serializeRequestBody("m", []), '{"model":"m","messages":[]}');
});

Deno.test("serializeRequestBody() serializes a message that is not frozen anew, so a change is never stale", () => {
  const message: Message = { role: "user", content: "first" };
  assert.match(serializeRequestBody("m", [message]), /"first"/);
  message.content = "second";
  assert.match(serializeRequestBody("m", [message]), /"second"/);
  assert.doesNotMatch(serializeRequestBody("m", [message]), /"first"/);
  const tools = [{ name: "a", description: "A", parameters: { type: "object" } }];
  assert.match(serializeRequestBody("m", [message], tools), /"name":"a"/);
  tools[0].name = "b";
  assert.match(serializeRequestBody("m", [message], tools), /"name":"b"/);
});

Deno.test("serializeRequestBody() still rejects a tool message without toolCallId", () => {
  const broken = freezeMessage({ role: "tool", content: "{}" } as Message);
  assert.throws(() => serializeRequestBody("m", [broken]), /tool message 0 has no toolCallId/);
  assert.throws(() => serializeRequestBody("m", [broken]), /tool message 0 has no toolCallId/);
});

Deno.test("buildContext() passes the messages through as the same objects, so their request JSON is reused", () => {
  const stored = freezeMessage({
    id: "r:1",
    createdAt: "2026-01-01T00:00:00.000Z",
    role: "assistant" as const,
    content: null,
    toolCalls: [{ id: "c1", name: "calculator", arguments: "{}" }],
  });
  const loose = { id: "r:2", createdAt: "2026-01-01T00:00:00.000Z", role: "user" as const, content: "hi" };
  const summary = '{"goals":["g"],"facts":[],"todos":[],"unresolved":[],"updated_at":"x"}';
  const a = buildContext([stored, loose], { summary });
  assert.equal(a[2], stored);
  assert.equal(a[3], loose);
  assert.deepEqual(buildContext([stored, loose], { summary }), a);
  // The request carries only what the model reads of a stored message.
  assert.doesNotMatch(serializeRequestBody("m", a), /r:1|createdAt/);
  // A new summary gives a new block; an invalid one gives none.
  const c = buildContext([stored], { summary: summary.replace('"g"', '"h"') });
  assert.match(c[1].content!, /"h"/);
  assert.equal(buildContext([stored], { summary: "not json" }).length, 2);
  assert.equal(buildContext([], { systemPrompt: "other" })[0].content, "other");
});

Deno.test("serializeRequestBody() does not cache a frozen message whose tool calls can still change", () => {
  const calls = [{ id: "c1", name: "calculator", arguments: '{"expression":"1+1"}' }];
  const message = Object.freeze({ role: "assistant" as const, content: null, toolCalls: calls });
  assert.match(serializeRequestBody("m", [message]), /1\+1/);
  calls[0] = { id: "c1", name: "calculator", arguments: '{"expression":"2+2"}' };
  assert.match(serializeRequestBody("m", [message]), /2\+2/);
  assert.match(buildContext([message])[1].toolCalls![0].arguments, /2\+2/);
});
