/**
 * The one test of "a JSON object" that every reader of untrusted JSON (request bodies, provider replies,
 * config files, tool arguments) shares, the name of a value's JSON type in their errors, and the freezing of
 * parsed JSON that is cached. Private to `src/`.
 * @module
 */

/** Whether `value` is a plain JSON object: not null, not an array. Never throws. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The JSON type of `value` as an error message names it: `null`, `array`, else its `typeof`. */
export function jsonType(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
}

/** Freezes a JSON value all the way down, in place, and returns it. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}
