/**
 * A small JSON Schema validator for the subset tool parameters use: `type`, `properties`, `required`,
 * `additionalProperties`, `enum`, `minLength`, `maxLength`, `minimum`, `maximum`, `items`. Written here
 * because runtime dependencies are Deno built-ins only; every problem is reported with its path.
 * @module
 */

/** A JSON Schema object, as tool specs write it. */
export interface JsonSchema {
  type?: "object" | "string" | "number" | "integer" | "boolean" | "array" | "null";
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean;
  enum?: readonly unknown[];
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  items?: JsonSchema;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number" && Number.isInteger(value)) return "integer";
  return typeof value;
}

function matchesType(type: NonNullable<JsonSchema["type"]>, value: unknown): boolean {
  switch (type) {
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value);
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
  }
}

function check(schema: JsonSchema, value: unknown, path: string, problems: string[]): void {
  if (schema.type !== undefined && !matchesType(schema.type, value)) {
    problems.push(`${path}: expected ${schema.type}, got ${describe(value)}`);
    return;
  }
  if (schema.enum !== undefined && !schema.enum.includes(value)) {
    problems.push(`${path}: expected one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`);
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      problems.push(`${path}: expected at least ${schema.minLength} characters, got ${length}`);
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      problems.push(`${path}: expected at most ${schema.maxLength} characters, got ${length}`);
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) {
      problems.push(`${path}: expected a number >= ${schema.minimum}, got ${value}`);
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      problems.push(`${path}: expected a number <= ${schema.maximum}, got ${value}`);
    }
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    value.forEach((item, i) => check(schema.items!, item, `${path}[${i}]`, problems));
  }
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const record = value as Record<string, unknown>;
    for (const name of schema.required ?? []) {
      if (!(name in record)) problems.push(`${path}.${name}: required property is missing`);
    }
    for (const [name, item] of Object.entries(record)) {
      const sub = schema.properties?.[name];
      if (sub !== undefined) check(sub, item, `${path}.${name}`, problems);
      else if (schema.additionalProperties === false) problems.push(`${path}.${name}: unexpected property`);
    }
  }
}

/**
 * Checks `value` against `schema` and returns every problem as `path: what was expected`, with `$` as the
 * root (`$.expression: expected string, got number`). An empty list means valid. Never throws.
 */
export function validateJsonSchema(schema: JsonSchema, value: unknown): string[] {
  const problems: string[] = [];
  check(schema, value, "$", problems);
  return problems;
}
