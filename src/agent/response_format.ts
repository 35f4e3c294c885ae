/**
 * Structured output: reading a client's `response_format`, checking an answer against it, and the words the
 * model is told (the format in the system message, the repair request after an answer that does not match).
 * Pure; the loop decides what to do with a verdict.
 * @module
 */
import { ResponseFormatError } from "../errors.ts";
import { isRecord, jsonType } from "../_json.ts";
import { shorten } from "../shorten.ts";
import { schemaProblems, validateJsonSchema } from "../tools/json_schema.ts";
import type { ResponseFormat } from "../types.ts";

/**
 * How the format reaches the provider: `native` sends `response_format` (and a short system line saying the
 * answer is JSON); `prompt` sends none, for providers that reject it, and writes the schema into the system
 * message instead. Either way the runtime checks the answer.
 */
export type ResponseFormatMode = "native" | "prompt";

/** The name a `json_schema` format is sent with when the client gave none (the provider requires one). */
export const DEFAULT_SCHEMA_NAME = "response";

/** Longest answer quoted back to the model in a repair request. */
const MAX_QUOTED_CHARS = 8000;

/** Most validation errors named in a repair request or an error message; the rest are counted. */
const MAX_NAMED_ERRORS = 20;

/** Options of {@linkcode parseResponseFormat}. */
export interface ParseResponseFormatOptions {
  /**
   * The schema's fields (`name`, `schema`, `strict`, `description`) sit beside `type`, as in the Responses
   * API's `text.format`, not under `json_schema`. @default {false}
   */
  flat?: boolean;
}

/**
 * Reads a client's `response_format` (OpenAI's shape, on both APIs): `{"type": "json_object"}`,
 * `{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}`, or
 * `{"type": "text"}`, `null` or absent: plain text, returned as null. Throws
 * {@linkcode ResponseFormatError} naming the parameter at fault for anything else: an unknown type, a schema
 * that is not an object, a schema whose keywords the validator checks are malformed (see
 * {@linkcode schemaProblems}), a name other than 1-64 characters of `a-z A-Z 0-9 _ -`. With `flat`, the
 * Responses API's `text.format`: `{"type": "json_schema", "name", "schema", "strict", "description"}`.
 */
export function parseResponseFormat(
  value: unknown,
  param = "response_format",
  options: ParseResponseFormatOptions = {},
): ResponseFormat | null {
  const { flat = false } = options;
  if (value === undefined || value === null) return null;
  if (!isRecord(value)) throw invalid(`${param} must be an object, got ${jsonType(value)}`, param);
  const { type } = value;
  if (type === "text") return null;
  if (type === "json_object") return { type };
  if (type !== "json_schema") {
    const got = type === undefined ? "none" : JSON.stringify(type);
    const message = `${param}.type must be "json_schema", "json_object" or "text", got ${got}`;
    throw invalid(message, `${param}.type`);
  }
  const at = flat ? param : `${param}.json_schema`;
  const spec = flat ? value : value.json_schema;
  if (!isRecord(spec)) throw invalid(`${at} must be an object, got ${jsonType(spec)}`, at);
  const { name = DEFAULT_SCHEMA_NAME, schema, strict, description } = spec;
  if (typeof name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    const message = `${at}.name must be 1-64 characters of a-z A-Z 0-9 _ -, got ${JSON.stringify(name)}`;
    throw invalid(message, `${at}.name`);
  }
  if (schema === undefined) throw invalid(`${at}.schema is missing`, `${at}.schema`);
  const problems = schemaProblems(schema);
  if (problems.length > 0) {
    const message = `${at}.schema is not a schema the runtime can check answers against: ${listed(problems)}`;
    throw invalid(message, `${at}.schema`);
  }
  if (strict !== undefined && strict !== null && typeof strict !== "boolean") {
    throw invalid(`${at}.strict must be a boolean, got ${jsonType(strict)}`, `${at}.strict`);
  }
  if (description !== undefined && typeof description !== "string") {
    throw invalid(`${at}.description must be a string, got ${jsonType(description)}`, `${at}.description`);
  }
  const format: ResponseFormat = { type, name, schema: schema as Record<string, unknown> };
  if (typeof strict === "boolean") format.strict = strict;
  if (description !== undefined) format.description = description;
  return format;
}

/** What {@linkcode checkAnswer} found: the answer as JSON text, or what is wrong with it. */
export type AnswerCheck = { ok: true; json: string } | { ok: false; errors: string[] };

/**
 * Checks an answer against `format`: it must be JSON (one surrounding markdown code fence is taken off, as
 * models in `prompt` mode often add one), an object for `json_object`, valid against the schema for
 * `json_schema`. The errors are `path: what was expected`, `$` the answer's root. Never throws.
 */
export function checkAnswer(format: ResponseFormat, text: string): AnswerCheck {
  const json = unfenced(text);
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    return { ok: false, errors: [`$: the answer is not JSON (${(error as Error).message})`] };
  }
  const errors = format.type === "json_schema"
    ? validateJsonSchema(format.schema, value)
    : isRecord(value)
    ? []
    : [`$: expected a JSON object, got ${jsonType(value)}`];
  return errors.length === 0 ? { ok: true, json } : { ok: false, errors };
}

/**
 * The runtime message asking the model once to answer again: what it answered (cut to 8,000 characters) and
 * every error, with the `[runtime]` prefix of the runtime's other messages.
 */
export function repairRequest(answer: string, errors: readonly string[]): string {
  return `[runtime] Your last answer does not match the required response format:\n${bullets(errors)}\n\n` +
    `Your answer was:\n${shorten(answer, MAX_QUOTED_CHARS)}\n\n` +
    "Answer the user's last message again with only the corrected JSON: no other text, no code fence.";
}

/**
 * The system message that tells the model the format: always that the answer is JSON and nothing else (a
 * provider's JSON mode wants the word in the messages); in `prompt` mode, the schema itself too.
 */
export function formatInstructions(format: ResponseFormat, mode: ResponseFormatMode): string {
  const head = "[RESPONSE FORMAT] The final answer of this turn (after any tool calls) must be JSON only: " +
    "no other text, no code fence.";
  if (format.type === "json_object") return `${head} It must be one JSON object.`;
  if (mode === "native") return `${head} It must match the JSON schema "${format.name}" of this request.`;
  const about = format.description === undefined ? "" : ` (${format.description})`;
  return `${head} It must be valid against this JSON schema${about}:\n${JSON.stringify(format.schema)}`;
}

/** The errors as one line for an error message: the first 20, then how many more. */
export function listed(errors: readonly string[]): string {
  const more = errors.length - MAX_NAMED_ERRORS;
  const shown = errors.slice(0, MAX_NAMED_ERRORS).join("; ");
  return more > 0 ? `${shown}; and ${more} more` : shown;
}

function bullets(errors: readonly string[]): string {
  const more = errors.length - MAX_NAMED_ERRORS;
  const lines = errors.slice(0, MAX_NAMED_ERRORS).map((error) => `- ${error}`);
  if (more > 0) lines.push(`- and ${more} more`);
  return lines.join("\n");
}

/** The text inside one surrounding code fence (```json … ```), else the text trimmed. */
function unfenced(text: string): string {
  const trimmed = text.trim();
  const fenced = /^```[A-Za-z0-9_-]*[ \t]*\r?\n([\s\S]*?)\r?\n?```$/.exec(trimmed);
  return fenced === null ? trimmed : fenced[1].trim();
}

function invalid(message: string, param: string): ResponseFormatError {
  return new ResponseFormatError(message, param);
}
