/**
 * The tool-argument validator on the schemas MCP servers send: type lists, nullable unions, `$ref`s,
 * `const`, `pattern`, schema-valued `additionalProperties`; and, on random values, the same verdict as ajv.
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "./_dev_deps.ts";
import { fc } from "./_fast_check.ts";
import { type JsonSchema, schemaProblems, validateJsonSchema } from "../src/tools/json_schema.ts";

/** Shapes as zod-to-json-schema and hand-written MCP servers produce them. */
const SCHEMAS: Record<string, JsonSchema> = {
  nullable: {
    type: "object",
    properties: { path: { type: "string" }, limit: { type: ["integer", "null"], minimum: 1 } },
    required: ["path"],
    additionalProperties: false,
  },
  union: {
    type: "object",
    properties: {
      target: { anyOf: [{ type: "string", minLength: 1 }, { type: "array", items: { type: "string" } }] },
      mode: { const: "fast" },
    },
    required: ["target"],
  },
  exactlyOne: { oneOf: [{ type: "integer" }, { type: "number", minimum: 10 }] },
  references: {
    $defs: {
      edit: {
        type: "object",
        properties: { oldText: { type: "string" }, newText: { type: "string" } },
        required: ["oldText", "newText"],
        additionalProperties: false,
      },
    },
    type: "object",
    properties: { edits: { type: "array", items: { $ref: "#/$defs/edit" }, minItems: 1 } },
    required: ["edits"],
  },
  recursive: {
    definitions: {
      node: {
        type: "object",
        properties: {
          name: { type: "string" },
          children: { type: "array", items: { $ref: "#/definitions/node" } },
        },
        required: ["name"],
      },
    },
    $ref: "#/definitions/node",
  },
  mapped: {
    type: "object",
    additionalProperties: { type: "string", pattern: "^[a-z]+$" },
    properties: { count: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 5 } },
  },
  all: { allOf: [{ type: "object", required: ["a"] }, { type: "object", required: ["b"] }] },
  booleans: {
    type: "object",
    properties: { never: false, anything: true },
    additionalProperties: { type: "integer" },
    anyOf: [true, { required: ["x"] }],
  },
};

Deno.test("validateJsonSchema() reads type lists, nullable unions, $refs, const, pattern, mapped objects and boolean schemas", () => {
  const ok = (name: string, value: unknown) => assert.deepEqual(validateJsonSchema(SCHEMAS[name], value), []);
  const bad = (name: string, value: unknown, problem: RegExp) =>
    assert.match(validateJsonSchema(SCHEMAS[name], value).join("; "), problem);
  ok("nullable", { path: "/a", limit: null });
  ok("nullable", { path: "/a", limit: 3 });
  bad("nullable", { path: "/a", limit: "3" }, /\$\.limit: expected integer or null, got string/);
  bad("nullable", { path: "/a", limit: 0 }, /\$\.limit: expected a number >= 1/);
  ok("union", { target: ["a", "b"], mode: "fast" });
  bad("union", { target: "" }, /\$\.target: matches none of anyOf's 2 schemas/);
  bad("union", { target: "x", mode: "slow" }, /\$\.mode: expected "fast"/);
  ok("exactlyOne", 3);
  ok("exactlyOne", 10.5);
  bad("exactlyOne", 12, /matches 2 of oneOf's schemas/);
  ok("references", { edits: [{ oldText: "a", newText: "b" }] });
  bad("references", { edits: [{ oldText: "a" }] }, /\$\.edits\[0\]\.newText: required property is missing/);
  bad("references", { edits: [] }, /expected at least 1 items/);
  ok("recursive", { name: "a", children: [{ name: "b", children: [{ name: "c" }] }] });
  bad("recursive", { name: "a", children: [{ children: [] }] }, /children\[0\]\.name: required/);
  ok("mapped", { count: 2, x: "abc" });
  bad("mapped", { x: "ABC" }, /\$\.x: expected a string matching/);
  bad("mapped", { count: 5 }, /expected a number < 5/);
  bad("all", { a: 1 }, /\$\.b: required property is missing/);
  ok("booleans", { anything: [{}], x: 1 });
  bad("booleans", { never: null }, /\$\.never: no value is allowed here/);
  assert.match(validateJsonSchema({ $ref: "#/nowhere" }, 1).join(), /refers to #\/nowhere, not found/);
  // A property named like an Object.prototype member is an ordinary property.
  assert.deepEqual(validateJsonSchema({ type: "object", required: ["toString"] }, {}), [
    "$.toString: required property is missing",
  ]);
});

Deno.test("validateJsonSchema() and ajv agree on random values for every schema above", () => {
  const ajv = new Ajv2020({ strict: false });
  const json = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small" },
      fc.constant(null),
      fc.boolean(),
      fc.integer({ min: -3, max: 15 }),
      fc.double({ min: -3, max: 15, noNaN: true, noDefaultInfinity: true }),
      fc.constantFrom("", "a", "abc", "ABC", "/a", "fast", "slow", "x"),
      fc.array(tie("value"), { maxLength: 3 }),
      fc.dictionary(
        fc.constantFrom(
          "path",
          "limit",
          "target",
          "mode",
          "edits",
          "oldText",
          "newText",
          "name",
          "children",
          "count",
          "x",
          "a",
          "b",
          "never",
          "anything",
        ),
        tie("value"),
        { maxKeys: 4 },
      ),
    ),
  })).value;
  for (const [name, schema] of Object.entries(SCHEMAS)) {
    const validate = ajv.compile(schema);
    fc.assert(
      fc.property(json, (value) => {
        const ours = validateJsonSchema(schema, value).length === 0;
        assert.equal(ours, validate(value), `${name}: ${JSON.stringify(value)}`);
      }),
      { numRuns: 400 },
    );
  }
});

Deno.test("schemaProblems() finds nothing wrong with every schema above, and names a malformed keyword by its pointer", () => {
  for (const [name, schema] of Object.entries(SCHEMAS)) assert.deepEqual(schemaProblems(schema), [], name);
  assert.deepEqual(schemaProblems({ properties: { "a/b": { minimum: "1" } }, anyOf: [] }), [
    "#/properties/a~1b/minimum: expected a number, got string",
    "#/anyOf: expected a non-empty array of schemas, got array",
  ]);
  assert.deepEqual(schemaProblems(true), ["#: a schema must be an object, got boolean"]);
});
