/**
 * The one test of "a JSON object" that every reader of untrusted JSON (request bodies, provider replies,
 * config files, tool arguments) shares. Private to `src/`.
 * @module
 */

/** Whether `value` is a plain JSON object: not null, not an array. Never throws. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
