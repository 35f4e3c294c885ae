/**
 * A small JSON Schema validator for what tool parameters and response formats use, the built-ins', MCP
 * servers' and API clients' alike: `type` (one or a list), `properties`, `required`, `additionalProperties`
 * (false or a schema), `enum`, `const`, `minLength`, `maxLength`, `pattern`, `minimum`, `maximum`,
 * `exclusiveMinimum`, `exclusiveMaximum`, `items` (one schema), `minItems`, `maxItems`, `anyOf`, `oneOf`,
 * `allOf`, local `$ref`s (`#/definitions/…`, `#/$defs/…`) and the schemas `true` and `false`. Other keywords
 * (`format`, `not`, `prefixItems`, `uniqueItems`, `multipleOf`, `patternProperties`, `minProperties`, `if`,
 * …) constrain nothing here: a schema that has them is accepted, and checked against the rest. Written here
 * because runtime dependencies are Deno built-ins only; every problem is reported with its path.
 * @module
 */
import { isRecord } from "../_json.ts";

type JsonType = "object" | "string" | "number" | "integer" | "boolean" | "array" | "null";

/** A JSON Schema object, as tool specs write it. */
export interface JsonSchema {
  type?: JsonType | readonly JsonType[];
  description?: string;
  properties?: Record<string, JsonSchema | boolean>;
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
  items?: JsonSchema | boolean;
  minItems?: number;
  maxItems?: number;
  anyOf?: readonly (JsonSchema | boolean)[];
  oneOf?: readonly (JsonSchema | boolean)[];
  allOf?: readonly (JsonSchema | boolean)[];
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
  trial(schema: JsonSchema | boolean, value: unknown, path: string, depth: number): string[] {
    const inner = new Checker(this.root);
    inner.check(schema, value, path, depth);
    return inner.problems;
  }

  check(schema: JsonSchema | boolean, value: unknown, path: string, depth = 0): void {
    const { problems } = this;
    if (depth > MAX_DEPTH) return void problems.push(`${path}: the schema nests too deep`);
    if (typeof schema === "boolean") {
      if (!schema) problems.push(`${path}: no value is allowed here`);
      return;
    }
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
 * root (`$.expression: expected string, got number`). An empty list means valid. Never throws for a schema
 * {@linkcode schemaProblems} finds nothing wrong with.
 */
export function validateJsonSchema(schema: JsonSchema, value: unknown): string[] {
  return new Checker(schema).trial(schema, value, "$", 0);
}

const TYPES: readonly string[] = ["object", "string", "number", "integer", "boolean", "array", "null"];
const NUMBER_KEYWORDS = [
  "minLength",
  "maxLength",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minItems",
  "maxItems",
] as const;

/**
 * What is wrong with `schema` as this validator reads it, each as `#/json/pointer: what was expected`: a
 * keyword it checks whose value has the wrong shape (`required` that is not a list of strings, an unknown
 * `type`, a `$ref` that points nowhere), or nesting deeper than 64 levels. Keywords it does not check are
 * not looked at. An empty list means it can check values against `schema`. Never throws.
 */
export function schemaProblems(schema: unknown): string[] {
  const problems: string[] = [];
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    return [`#: a schema must be an object, got ${describe(schema)}`];
  }
  const root = schema as JsonSchema;
  const visit = (node: unknown, at: string, depth: number): void => {
    if (typeof node === "boolean") return;
    if (!isRecord(node)) {
      return void problems.push(`${at}: a schema must be an object or a boolean, got ${describe(node)}`);
    }
    if (depth > MAX_DEPTH) {
      return void problems.push(`${at}: the schema nests deeper than ${MAX_DEPTH} levels`);
    }
    const want = (keyword: string, expected: string) =>
      problems.push(`${at}/${keyword}: expected ${expected}, got ${describe(node[keyword])}`);
    const { type, required, enum: options, pattern, $ref } = node;
    const types = type === undefined ? null : Array.isArray(type) ? type : [type];
    if (types !== null && (types.length === 0 || types.some((t) => !TYPES.includes(t)))) {
      const expected = `one of ${TYPES.join(", ")} (or a list of them), got ${JSON.stringify(type)}`;
      problems.push(`${at}/type: expected ${expected}`);
    }
    const strings = Array.isArray(required) && required.every((r) => typeof r === "string");
    if (required !== undefined && !strings) want("required", "an array of strings");
    if (options !== undefined && !Array.isArray(options)) want("enum", "an array");
    if (pattern !== undefined && typeof pattern !== "string") want("pattern", "a string");
    for (const keyword of NUMBER_KEYWORDS) {
      if (node[keyword] !== undefined && typeof node[keyword] !== "number") want(keyword, "a number");
    }
    if ($ref !== undefined) {
      if (typeof $ref !== "string") want("$ref", "a string");
      else if (resolve(root, $ref) === null) {
        problems.push(`${at}/$ref: ${JSON.stringify($ref)} points to no schema in this document`);
      }
    }
    for (const keyword of ["properties", "definitions", "$defs"]) {
      const map = node[keyword];
      if (map === undefined) continue;
      if (!isRecord(map)) {
        want(keyword, "an object of schemas");
        continue;
      }
      for (const [name, sub] of Object.entries(map)) {
        visit(sub, `${at}/${keyword}/${pointer(name)}`, depth + 1);
      }
    }
    for (const keyword of ["anyOf", "oneOf", "allOf"]) {
      const list = node[keyword];
      if (list === undefined) continue;
      if (!Array.isArray(list) || list.length === 0) want(keyword, "a non-empty array of schemas");
      else list.forEach((sub, i) => visit(sub, `${at}/${keyword}/${i}`, depth + 1));
    }
    // An array of schemas under `items` (the old tuple form) is one this validator does not check.
    if (node.items !== undefined && !Array.isArray(node.items)) visit(node.items, `${at}/items`, depth + 1);
    if (node.additionalProperties !== undefined) {
      visit(node.additionalProperties, `${at}/additionalProperties`, depth + 1);
    }
  };
  visit(root, "#", 0);
  return problems;
}

/** A property name as a JSON pointer segment. */
function pointer(name: string): string {
  return name.replaceAll("~", "~0").replaceAll("/", "~1");
}
