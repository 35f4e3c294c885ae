/**
 * Structured output in the loop: a turn with a response format passes it to the model, checks the final
 * answer with the runtime's JSON Schema validator, asks once for a repair naming the errors, then ends
 * `invalid_output`; in `prompt` mode the schema goes in the system message instead. And the reading of a
 * client's `response_format`.
 */
import assert from "node:assert/strict";
import { runTurn } from "../src/agent/loop.ts";
import { checkAnswer, parseResponseFormat } from "../src/agent/response_format.ts";
import { ResponseFormatError } from "../src/errors.ts";
import type { ResponseFormat } from "../src/types.ts";
import { harness, keyOf } from "./_harness.ts";

const SCHEMA = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1 },
    population: { type: "integer", minimum: 0 },
  },
  required: ["city", "population"],
  additionalProperties: false,
};
const FORMAT: ResponseFormat = { type: "json_schema", name: "city", schema: SCHEMA };
const VALID = '{"city":"Lyon","population":522250}';

function input(message: string, responseFormat: ResponseFormat | null = FORMAT) {
  return { sessionId: "s1", userId: "u1", message, responseFormat };
}

Deno.test("runTurn() answers a valid JSON answer the first time, the format sent to the model", async () => {
  using h = harness([{ content: VALID }]);
  const deltas: string[] = [];
  const run = { ...h.run, onDelta: (text: string) => deltas.push(text) };
  const result = await runTurn(input("the biggest city of the Rhône?"), h.agent, run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, VALID);
  assert.equal(result.failure, undefined);
  const [request] = h.llm.requests;
  assert.deepEqual(request.responseFormat, FORMAT);
  const system = request.messages.filter((m) => m.role === "system").map((m) => m.content!);
  assert.match(system[1], /^\[RESPONSE FORMAT\] .*JSON only.*the JSON schema "city" of this request/);
  assert.ok(!system[1].includes("minLength"), "native mode does not repeat the schema");
  assert.deepEqual(deltas, [], "an answer that is checked first is not streamed");
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => [m.role, m.content]), [
    ["user", "the biggest city of the Rhône?"],
    ["assistant", VALID],
  ]);
  assert.ok(!h.events.some((e) => e.event === "output_invalid"));
});

Deno.test("runTurn() takes the JSON out of one code fence around it, and stores it so", async () => {
  using h = harness([{ content: "```json\n" + VALID + "\n```" }]);
  const result = await runTurn(input("Lyon?"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, VALID);
  assert.equal(h.events.find((e) => e.event === "answer")!.data.text, VALID);
});

Deno.test("runTurn() asks once for a repair naming the errors, and answers with the repaired JSON", async () => {
  using h = harness([
    { content: '{"city":"Lyon","population":"lots"}' },
    { content: VALID },
  ]);
  const result = await runTurn(input("Lyon?"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, VALID);
  const repair = h.llm.requests[1].messages.at(-1)!;
  assert.equal(repair.role, "runtime", "the repair request is the runtime's message (sent as a user one)");
  assert.match(repair.content!, /^\[runtime\] Your last answer does not match the required response format:/);
  assert.match(repair.content!, /- \$\.population: expected integer, got string/);
  assert.match(repair.content!, /"population":"lots"/, "it quotes the answer");
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => m.role), ["user", "runtime", "assistant"]);
  assert.equal((await h.store.get(keyOf("s1", "u1")))!.turnCount, 1, "the repair request is not a user turn");
  const invalid = h.events.filter((e) => e.event === "output_invalid");
  assert.deepEqual(invalid.map((e) => [e.step, e.data.repair, e.data.errors]), [
    [0, true, ["$.population: expected integer, got string"]],
  ]);
  assert.equal(h.events.at(-1)!.data.outcome, "answered");
});

Deno.test("runTurn() ends invalid_output with the errors when the repaired answer is still invalid", async () => {
  using h = harness([
    { content: "Lyon has about half a million people." },
    { content: '{"city":"","population":-1,"region":"ARA"}' },
    { content: "never asked" },
  ]);
  const result = await runTurn(input("Lyon?"), h.agent, h.run);
  assert.equal(result.outcome, "invalid_output");
  assert.equal(h.llm.requests.length, 2, "one repair request, no more");
  assert.match(h.llm.requests[1].messages.at(-1)!.content!, /\$: the answer is not JSON/);
  const errors = [
    "$.city: expected at least 1 characters, got 0",
    "$.population: expected a number >= 0, got -1",
    "$.region: unexpected property",
  ];
  assert.deepEqual(result.failure?.errors, errors);
  assert.equal(result.failure?.kind, "invalid_output");
  assert.match(
    result.failure!.message,
    /does not match the response format after a repair request: \$\.city/,
  );
  assert.equal(result.answer, '{"city":"","population":-1,"region":"ARA"}');
  // The invalid answer is stored as the turn's answer: the turn is over, there is nothing to retry.
  const stored = await h.store.messages(keyOf("s1", "u1"));
  assert.deepEqual(stored.map((m) => m.role), ["user", "runtime", "assistant"]);
  const names = h.events.map((e) => e.event);
  assert.deepEqual(names, [
    "run_start",
    "llm_call",
    "output_invalid",
    "llm_call",
    "output_invalid",
    "answer",
    "run_end",
  ]);
  assert.deepEqual(h.events.filter((e) => e.event === "output_invalid").map((e) => e.data.repair), [
    true,
    false,
  ]);
  assert.equal(h.events.at(-1)!.data.outcome, "invalid_output");
});

Deno.test("runTurn() in prompt mode sends no response_format and writes the schema into the system message", async () => {
  using h = harness([{ content: '{"city":"Lyon"}' }, { content: VALID }]);
  h.agent.responseFormatMode = "prompt";
  const result = await runTurn(input("Lyon?"), h.agent, h.run);
  assert.equal(result.outcome, "answered", "the answer is checked and repaired all the same");
  for (const request of h.llm.requests) {
    assert.equal(request.responseFormat, null);
    const format = request.messages.find((m) => m.content?.startsWith("[RESPONSE FORMAT]"))!;
    assert.equal(format.role, "system");
    assert.ok(format.content!.endsWith(`:\n${JSON.stringify(SCHEMA)}`), format.content!);
  }
  assert.match(h.llm.requests[1].messages.at(-1)!.content!, /\$\.population: required property is missing/);
});

Deno.test("runTurn() checks only the final answer: tool calls run first, their text is not checked", async () => {
  using h = harness([
    { content: "Let me compute.", toolCalls: [{ name: "calculator", arguments: { expression: "6*7" } }] },
    { content: '{"city":"Answer","population":42}' },
  ]);
  const result = await runTurn(input("6*7 as a city"), h.agent, h.run);
  assert.equal(result.outcome, "answered");
  assert.equal(result.toolCalls.length, 1);
  assert.deepEqual(h.llm.requests[1].responseFormat, FORMAT, "every request of the turn carries it");
});

Deno.test("runTurn() with json_object wants one JSON object, and no format leaves text alone", async () => {
  using h = harness([{ content: "[1, 2]" }, { content: '{"ok": true}' }, { content: "plain [text" }]);
  const objects = await runTurn(input("json please", { type: "json_object" }), h.agent, h.run);
  assert.equal(objects.outcome, "answered");
  assert.equal(objects.answer, '{"ok": true}');
  assert.match(h.llm.requests[1].messages.at(-1)!.content!, /- \$: expected a JSON object, got array/);
  assert.match(h.llm.requests[0].messages[1].content!, /must be JSON only.*one JSON object/);
  const text = await runTurn(input("text please", null), h.agent, h.run);
  assert.equal(text.outcome, "answered");
  assert.equal(text.answer, "plain [text");
  assert.equal(h.llm.requests[2].responseFormat, null);
  assert.ok(!h.llm.requests[2].messages.some((m) => m.content?.startsWith("[RESPONSE FORMAT]")));
});

Deno.test("parseResponseFormat() reads OpenAI's shapes: json_schema (name defaulted), json_object, text", () => {
  assert.equal(parseResponseFormat(undefined), null);
  assert.equal(parseResponseFormat(null), null);
  assert.equal(parseResponseFormat({ type: "text" }), null);
  assert.deepEqual(parseResponseFormat({ type: "json_object" }), { type: "json_object" });
  assert.deepEqual(parseResponseFormat({ type: "json_schema", json_schema: { schema: SCHEMA } }), {
    type: "json_schema",
    name: "response",
    schema: SCHEMA,
  });
  assert.deepEqual(
    parseResponseFormat({
      type: "json_schema",
      json_schema: { name: "City_1", schema: SCHEMA, strict: true, description: "a city" },
    }),
    { type: "json_schema", name: "City_1", schema: SCHEMA, strict: true, description: "a city" },
  );
});

Deno.test("parseResponseFormat() accepts keywords the validator does not check, and checks the rest", () => {
  const schema = {
    $schema: "http://json-schema.org/draft-07/schema#",
    type: "object",
    properties: {
      email: { type: "string", format: "email" },
      tags: { type: "array", items: { type: "string" }, uniqueItems: true },
      code: { not: { const: "x" }, multipleOf: 3 },
      free: true,
    },
    required: ["email"],
    patternProperties: { "^x-": { type: "string" } },
  };
  const format = parseResponseFormat({ type: "json_schema", json_schema: { name: "n", schema } })!;
  assert.deepEqual(checkAnswer(format, '{"email":"not an email","tags":["a","a"],"code":"x","free":[1]}'), {
    ok: true,
    json: '{"email":"not an email","tags":["a","a"],"code":"x","free":[1]}',
  });
  assert.deepEqual(checkAnswer(format, '{"tags":[1]}'), {
    ok: false,
    errors: ["$.email: required property is missing", "$.tags[0]: expected string, got integer"],
  });
});

Deno.test("parseResponseFormat() names the parameter and the problem of a format it cannot use", () => {
  const cases: [unknown, string, RegExp][] = [
    ["json", "response_format", /^response_format must be an object, got string$/],
    [{ type: "xml" }, "response_format.type", /must be "json_schema", "json_object" or "text", got "xml"/],
    [{}, "response_format.type", /got none$/],
    [{ type: "json_schema" }, "response_format.json_schema", /json_schema must be an object, got undefined/],
    [{ type: "json_schema", json_schema: {} }, "response_format.json_schema.schema", /schema is missing/],
    [
      { type: "json_schema", json_schema: { schema: [] } },
      "response_format.json_schema.schema",
      /#: a schema must be an object, got array/,
    ],
    [
      { type: "json_schema", json_schema: { schema: { type: "objekt" } } },
      "response_format.json_schema.schema",
      /#\/type: expected one of object, .* got "objekt"/,
    ],
    [
      { type: "json_schema", json_schema: { schema: { properties: { a: { required: "b", enum: 1 } } } } },
      "response_format.json_schema.schema",
      /#\/properties\/a\/required: expected an array of strings, got string; #\/properties\/a\/enum: expected an array, got integer/,
    ],
    [
      { type: "json_schema", json_schema: { schema: { items: { $ref: "#/$defs/missing" } } } },
      "response_format.json_schema.schema",
      /#\/items\/\$ref: "#\/\$defs\/missing" points to no schema/,
    ],
    [
      { type: "json_schema", json_schema: { name: "a b", schema: {} } },
      "response_format.json_schema.name",
      /name must be 1-64 characters of a-z A-Z 0-9 _ -, got "a b"/,
    ],
    [
      { type: "json_schema", json_schema: { schema: {}, strict: "yes" } },
      "response_format.json_schema.strict",
      /strict must be a boolean, got string/,
    ],
  ];
  for (const [value, param, message] of cases) {
    assert.throws(
      () => parseResponseFormat(value),
      (error) => error instanceof ResponseFormatError && error.param === param && message.test(error.message),
      JSON.stringify(value),
    );
  }
});
