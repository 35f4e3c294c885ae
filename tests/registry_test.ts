import assert from "node:assert/strict";
import { MAX_TOOL_RESULT_CHARS } from "../src/config.ts";
import { validateJsonSchema } from "../src/tools/json_schema.ts";
import { serializeToolResult, ToolRegistry, type ToolSpec } from "../src/tools/registry.ts";

const echo: ToolSpec = {
  name: "echo",
  description: "echo",
  parameters: {
    type: "object",
    properties: { text: { type: "string", minLength: 1 }, times: { type: "integer", minimum: 1 } },
    required: ["text"],
    additionalProperties: false,
  },
  handler: (args) => ({ text: String(args.text).repeat(Number(args.times ?? 1)) }),
};
const boom: ToolSpec = {
  name: "boom",
  description: "throws",
  parameters: { type: "object" },
  handler: () => {
    throw new Error("disk on fire");
  },
};
const ctx = { sessionId: "s", userId: "u" };
const call = (name: string, args: string) => ({ id: "c", name, arguments: args });

Deno.test("ToolRegistry.execute() returns the handler's data on success", async () => {
  const registry = new ToolRegistry([echo]);
  assert.deepEqual(await registry.execute(call("echo", '{"text":"hi","times":2}'), ctx), {
    ok: true,
    data: { text: "hihi" },
    error: null,
    truncated: false,
  });
});

Deno.test("ToolRegistry.execute() reports every schema problem with its path", async () => {
  const registry = new ToolRegistry([echo]);
  const result = await registry.execute(call("echo", '{"times":0,"extra":true}'), ctx);
  assert.equal(result.ok, false);
  assert.equal(result.data, null);
  assert.equal(
    result.error,
    'Cannot run tool "echo": invalid arguments: $.text: required property is missing; ' +
      "$.times: expected a number >= 1, got 0; $.extra: unexpected property",
  );
});

Deno.test("ToolRegistry.execute() turns invalid JSON, unknown tools and throwing handlers into results", async () => {
  const registry = new ToolRegistry([echo, boom]);
  const bad = await registry.execute(call("echo", "{oops"), ctx);
  assert.match(bad.error!, /^Cannot run tool "echo": arguments are not valid JSON/);
  const unknown = await registry.execute(call("nope", "{}"), ctx);
  assert.equal(unknown.error, 'Unknown tool "nope"; available tools: echo, boom');
  const thrown = await registry.execute(call("boom", "{}"), ctx);
  assert.deepEqual(thrown, {
    ok: false,
    data: null,
    error: 'Tool "boom" failed: disk on fire',
    truncated: false,
  });
  const array = await registry.execute(call("echo", "[1]"), ctx);
  assert.match(array.error!, /\$: expected object, got array/);
});

Deno.test("ToolRegistry.execute() cuts a long result to MAX_TOOL_RESULT_CHARS and marks it truncated", async () => {
  const registry = new ToolRegistry([echo]);
  const result = await registry.execute(call("echo", JSON.stringify({ text: 'ab"\\', times: 5000 })), ctx);
  assert.equal(result.ok, true);
  assert.equal(result.truncated, true);
  const serialized = serializeToolResult(result);
  assert.ok(serialized.length <= MAX_TOOL_RESULT_CHARS, `got ${serialized.length}`);
  assert.ok(serialized.length > MAX_TOOL_RESULT_CHARS - 10, "keeps as much as fits");
  assert.ok((result.data as string).startsWith('{"text":"ab\\"\\\\ab'));
});

Deno.test("ToolRegistry.fit() cuts a long error message to the result limit and keeps its start", () => {
  const registry = new ToolRegistry([echo]);
  const error = `Cannot run tool "echo": ${'"quoted" '.repeat(1000)}`;
  const result = registry.fit({ ok: false, data: null, error, truncated: false });
  assert.equal(result.ok, false);
  assert.equal(result.truncated, true);
  const serialized = serializeToolResult(result);
  assert.ok(serialized.length <= MAX_TOOL_RESULT_CHARS, `got ${serialized.length}`);
  assert.ok(serialized.length > MAX_TOOL_RESULT_CHARS - 10, "keeps as much as fits");
  assert.ok(result.error!.startsWith('Cannot run tool "echo": "quoted" '));
  const short = { ok: false, data: null, error: "short", truncated: false } as const;
  assert.equal(registry.fit(short), short);
});

Deno.test("ToolRegistry refuses two tools with one name", () => {
  assert.throws(() => new ToolRegistry([echo, echo]), /Cannot register tool "echo" twice/);
});

Deno.test("validateJsonSchema() checks enums, string lengths, nested arrays and integer vs number", () => {
  const schema = {
    type: "object" as const,
    properties: {
      mode: { enum: ["a", "b"] },
      tags: { type: "array" as const, items: { type: "string" as const, maxLength: 2 } },
      n: { type: "integer" as const },
    },
  };
  assert.deepEqual(validateJsonSchema(schema, { mode: "c", tags: ["ok", "long"], n: 1.5 }), [
    '$.mode: expected one of "a", "b"',
    "$.tags[1]: expected at most 2 characters, got 4",
    "$.n: expected integer, got number",
  ]);
  assert.deepEqual(validateJsonSchema(schema, { mode: "a", tags: [], n: 3 }), []);
});

Deno.test("ToolRegistry.schemas() is one array, frozen all the way down, unaffected by later changes to a spec", () => {
  const parameters = {
    type: "object",
    properties: { text: { type: "string" } },
    required: ["text"],
  } as ToolSpec["parameters"];
  const registry = new ToolRegistry([{ ...echo, parameters }]);
  const schemas = registry.schemas();
  assert.equal(registry.schemas(), schemas);
  assert.ok(Object.isFrozen(schemas) && schemas.every((tool) => Object.isFrozen(tool.parameters)));
  assert.ok(Object.isFrozen((schemas[0].parameters.properties as Record<string, object>).text));
  (parameters.properties as Record<string, unknown>).extra = { type: "number" };
  assert.deepEqual(Object.keys(schemas[0].parameters.properties as object), ["text"]);
});
