/**
 * The one test of "a JSON object" that every reader of untrusted JSON (request bodies, provider replies,
 * config files, tool arguments) shares, and the freezing of parsed JSON that is cached. Private to `src/`.
 * @module
 */

/** Whether `value` is a plain JSON object: not null, not an array. Never throws. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Freezes a JSON value all the way down, in place, and returns it. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}
