/**
 * A small JSON Schema validator for what tool parameters use, the built-ins' and MCP servers' alike: `type`
 * (one or a list), `properties`, `required`, `additionalProperties` (false or a schema), `enum`, `const`,
 * `minLength`, `maxLength`, `pattern`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `items`,
 * `minItems`, `maxItems`, `anyOf`, `oneOf`, `allOf` and local `$ref`s (`#/definitions/…`, `#/$defs/…`). Other
 * keywords (`format`, `default`, `description`, …) constrain nothing here. Written here because runtime
 * dependencies are Deno built-ins only; every problem is reported with its path.
 * @module
 */
import { isRecord } from "../_json.ts";

type JsonType = "object" | "string" | "number" | "integer" | "boolean" | "array" | "null";

/** A JSON Schema object, as tool specs write it. */
export interface JsonSchema {
  type?: JsonType | readonly JsonType[];
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: readonly string[];
  additionalProperties?: boolean | JsonSchema;
  enum?: readonly unknown[];
  const?: unknown;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  items?: JsonSchema;
  minItems?: number;
  maxItems?: number;
  anyOf?: readonly JsonSchema[];
  oneOf?: readonly JsonSchema[];
  allOf?: readonly JsonSchema[];
  $ref?: string;
  definitions?: Record<string, JsonSchema>;
  $defs?: Record<string, JsonSchema>;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number" && Number.isInteger(value)) return "integer";
  return typeof value;
}

function matchesType(type: JsonType, value: unknown): boolean {
  switch (type) {
    case "object":
      return isRecord(value);
    case "array":
      return Array.isArray(value);
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "null":
      return value === null;
    case "string":
      return typeof value === "string";
    case "boolean":
      return typeof value === "boolean";
    default:
      return false; // a type this validator does not know matches nothing, as in JSON Schema
  }
}

/** Whether two JSON values are equal (for `enum` and `const`). */
function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The schema a local `$ref` points to in `root`, or null when it points nowhere. */
function resolve(root: JsonSchema, ref: string): JsonSchema | null {
  if (!ref.startsWith("#")) return null;
  let node: unknown = root;
  for (const part of ref.slice(1).split("/").filter((p) => p !== "")) {
    const key = decodeURIComponent(part).replaceAll("~1", "/").replaceAll("~0", "~");
    if (typeof node !== "object" || node === null || !(key in node)) return null;
    node = (node as Record<string, unknown>)[key];
  }
  return typeof node === "object" && node !== null ? node as JsonSchema : null;
}

/** How deep `$ref`s may nest: a schema that refers to itself cannot loop forever. */
const MAX_DEPTH = 64;

class Checker {
  readonly problems: string[] = [];
  constructor(private readonly root: JsonSchema) {}

  /** The problems of `value` against `schema`, without recording them (for `anyOf`, `oneOf`). */
  trial(schema: JsonSchema, value: unknown, path: string, depth: number): string[] {
    const inner = new Checker(this.root);
    inner.check(schema, value, path, depth);
    return inner.problems;
  }

  check(schema: JsonSchema, value: unknown, path: string, depth = 0): void {
    const { problems } = this;
    if (depth > MAX_DEPTH) return void problems.push(`${path}: the schema nests too deep`);
    if (schema.$ref !== undefined) {
      const target = resolve(this.root, schema.$ref);
      if (target === null) {
        return void problems.push(`${path}: the schema refers to ${schema.$ref}, not found`);
      }
      this.check(target, value, path, depth + 1);
    }
    if (schema.type !== undefined) {
      const types: readonly JsonType[] = typeof schema.type === "string" ? [schema.type] : schema.type;
      if (!types.some((type) => matchesType(type, value))) {
        return void problems.push(`${path}: expected ${types.join(" or ")}, got ${describe(value)}`);
      }
    }
    if (schema.enum !== undefined && !schema.enum.some((option) => same(option, value))) {
      problems.push(`${path}: expected one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`);
    }
    if ("const" in schema && !same(schema.const, value)) {
      problems.push(`${path}: expected ${JSON.stringify(schema.const)}`);
    }
    for (const sub of schema.allOf ?? []) this.check(sub, value, path, depth + 1);
    this.#alternatives(schema, value, path, depth);
    if (typeof value === "string") this.#string(schema, value, path);
    if (typeof value === "number") this.#number(schema, value, path);
    if (Array.isArray(value)) this.#array(schema, value, path, depth);
    if (isRecord(value)) {
      this.#object(schema, value, path, depth);
    }
  }

  #alternatives(schema: JsonSchema, value: unknown, path: string, depth: number): void {
    for (const [keyword, options] of [["anyOf", schema.anyOf], ["oneOf", schema.oneOf]] as const) {
      if (options === undefined) continue;
      const results = options.map((option) => this.trial(option, value, path, depth + 1));
      const passing = results.filter((found) => found.length === 0).length;
      if (passing === 0) {
        const closest = results.reduce((a, b) => (b.length < a.length ? b : a), results[0] ?? []);
        this.problems.push(`${path}: matches none of ${keyword}'s ${options.length} schemas`, ...closest);
      } else if (keyword === "oneOf" && passing > 1) {
        this.problems.push(`${path}: matches ${passing} of oneOf's schemas, expected exactly one`);
      }
    }
  }

  #string(schema: JsonSchema, value: string, path: string): void {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      this.problems.push(`${path}: expected at least ${schema.minLength} characters, got ${length}`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      this.problems.push(`${path}: expected at most ${schema.maxLength} characters, got ${length}`);
    }
    if (schema.pattern !== undefined) {
      let pattern: RegExp | null = null;
      try {
        pattern = new RegExp(schema.pattern, "u");
      } catch {
        // A pattern JavaScript cannot read constrains nothing, rather than refusing every call.
      }
      if (pattern !== null && !pattern.test(value)) {
        this.problems.push(`${path}: expected a string matching /${schema.pattern}/`);
      }
    }
  }

  #number(schema: JsonSchema, value: number, path: string): void {
    const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = schema;
    if (minimum !== undefined && value < minimum) {
      this.problems.push(`${path}: expected a number >= ${minimum}, got ${value}`);
    }
    if (maximum !== undefined && value > maximum) {
      this.problems.push(`${path}: expected a number <= ${maximum}, got ${value}`);
    }
    if (typeof exclusiveMinimum === "number" && value <= exclusiveMinimum) {
      this.problems.push(`${path}: expected a number > ${exclusiveMinimum}, got ${value}`);
    }
    if (typeof exclusiveMaximum === "number" && value >= exclusiveMaximum) {
      this.problems.push(`${path}: expected a number < ${exclusiveMaximum}, got ${value}`);
    }
  }

  #array(schema: JsonSchema, value: unknown[], path: string, depth: number): void {
    if (schema.minItems !== undefined && value.length < schema.minItems) {
      this.problems.push(`${path}: expected at least ${schema.minItems} items, got ${value.length}`);
    }
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      this.problems.push(`${path}: expected at most ${schema.maxItems} items, got ${value.length}`);
    }
    if (schema.items !== undefined && !Array.isArray(schema.items)) {
      value.forEach((item, i) => this.check(schema.items!, item, `${path}[${i}]`, depth + 1));
    }
  }

  #object(schema: JsonSchema, record: Record<string, unknown>, path: string, depth: number): void {
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(record, name)) this.problems.push(`${path}.${name}: required property is missing`);
    }
    const { properties, additionalProperties: extra } = schema;
    for (const [name, item] of Object.entries(record)) {
      const sub = properties !== undefined && Object.hasOwn(properties, name) ? properties[name] : undefined;
      if (sub !== undefined) this.check(sub, item, `${path}.${name}`, depth + 1);
      else if (extra === false) this.problems.push(`${path}.${name}: unexpected property`);
      else if (typeof extra === "object") this.check(extra, item, `${path}.${name}`, depth + 1);
    }
  }
}

/**
 * Checks `value` against `schema` and returns every problem as `path: what was expected`, with `$` as the
 * root (`$.expression: expected string, got number`). An empty list means valid. Never throws.
 */
export function validateJsonSchema(schema: JsonSchema, value: unknown): string[] {
  const checker = new Checker(schema);
  checker.check(schema, value, "$");
  return checker.problems;
}
