/**
 * The one retry loop: call a function until it succeeds, waiting a growing, capped, optionally jittered pause
 * between attempts, in the shape of Deno std's `async/retry.ts`. Unlike std's it takes an abort signal (an
 * abort ends the wait at once), lets a failure name its own wait (a provider's `Retry-After`), jitters both
 * ways, and rejects with the last error itself rather than a wrapper. `retrySync` is the same loop for the
 * one caller that cannot await (the SQLite store opens in its constructor).
 * @module
 */
import { abortable, abortError, delay as abortableDelay } from "./abort.ts";

/** How the wait between attempts grows; see {@linkcode backoffDelay}. */
export interface BackoffOptions {
  /** The wait after the first failure, in milliseconds, and the least backoff. @default {1000} */
  minTimeout?: number;
  /** How much each wait grows: the one after failure n is `minTimeout · multiplier^(n−1)`. @default {2} */
  multiplier?: number;
  /** The longest backoff, in milliseconds, before jitter; `Infinity` for none. @default {60000} */
  maxTimeout?: number;
  /**
   * How far a wait may stray from the backoff, as a fraction: it is drawn evenly from
   * `backoff · [1 − jitter, 1 + jitter)`, so waiting processes spread out. 0 waits the backoff exactly.
   * @default {0}
   */
  jitter?: number;
  /** A number in [0, 1) for the jitter; tests pass a fixed one. @default {Math.random} */
  random?: () => number;
}

/** What both loops share: how many attempts, which failures are tried again, and how long to wait. */
export interface RetryPolicyOptions extends BackoffOptions {
  /** Attempts in all, the first included; `Infinity` tries until it succeeds or is aborted. @default {5} */
  maxAttempts?: number;
  /**
   * Whether the failure of attempt `attempt` (1 is the first) is worth another; if not, the loop rejects
   * with `error` at once. Not asked after the last attempt.
   * @default {() => true}
   */
  isRetriable?: (error: unknown, attempt: number) => boolean;
  /**
   * The wait, in milliseconds, that this failure asks for instead of the backoff (a provider's
   * `Retry-After`), or `undefined` for the backoff. Used as is: neither jittered nor capped.
   * @default {() => undefined}
   */
  retryAfter?: (error: unknown, attempt: number) => number | undefined;
  /**
   * The longest time, in milliseconds since the loop started, that it keeps trying: a wait that would end
   * later is not begun, and the failure is thrown instead.
   * @default {Infinity}
   */
  maxElapsed?: number;
  /** The clock `maxElapsed` is measured with, in milliseconds. @default {() => performance.now()} */
  now?: () => number;
  /** Told before each wait: the failure, the attempt that failed and the wait. Must not throw. @default {undefined} */
  onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
}

/** Options of {@linkcode retry}. */
export interface RetryOptions extends RetryPolicyOptions {
  /**
   * Stops the loop: no attempt starts once it has aborted, and a wait ends at once; `retry` then rejects
   * with its reason (an `AbortError` when it has none).
   * @default {undefined}
   */
  signal?: AbortSignal;
  /** Waits between attempts; tests pass a fake that records the waits. @default {delay} from `abort.ts` */
  delay?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** Options of {@linkcode retrySync}. */
export interface RetrySyncOptions extends RetryPolicyOptions {
  /** Waits between attempts, blocking the thread. @default {blocking wait with `Atomics.wait`} */
  delay?: (ms: number) => void;
}

const CANNOT = "Cannot retry";

function requireFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== "function") {
    throw new TypeError(`${CANNOT}: "${name}" must be a function, got ${typeof value}`);
  }
}

function requireRange(name: string, value: number, expected: string, ok: boolean): void {
  if (typeof value !== "number" || Number.isNaN(value) || !ok) {
    throw new RangeError(`${CANNOT}: "${name}" must be ${expected}, got ${value}`);
  }
}

/** The backoff options with their defaults, checked: `RangeError` for a value out of range. */
function checkBackoff(options: BackoffOptions): Required<BackoffOptions> {
  const { minTimeout = 1000, multiplier = 2, maxTimeout = 60_000, jitter = 0, random = Math.random } =
    options;
  requireRange(
    "minTimeout",
    minTimeout,
    "a finite number of 0 or more",
    Number.isFinite(minTimeout) && minTimeout >= 0,
  );
  requireRange(
    "multiplier",
    multiplier,
    "a finite number of 1 or more",
    Number.isFinite(multiplier) && multiplier >= 1,
  );
  requireRange("maxTimeout", maxTimeout, "a number greater than 0 (Infinity for no cap)", maxTimeout > 0);
  if (minTimeout > maxTimeout) {
    throw new RangeError(
      `${CANNOT}: "minTimeout" (${minTimeout}) must not exceed "maxTimeout" (${maxTimeout})`,
    );
  }
  requireRange("jitter", jitter, "a number from 0 to 1", jitter >= 0 && jitter <= 1);
  requireFunction("random", random);
  return { minTimeout, multiplier, maxTimeout, jitter, random };
}

/**
 * The wait before retry number `retry` (0 is the wait after the first failure), in milliseconds:
 * `min(maxTimeout, minTimeout · multiplier^retry)`, then jittered. For clients that run their own reconnect
 * loop and ask only for the schedule (the PostgreSQL pool). `RangeError` for bad options or a negative `retry`.
 */
export function backoffDelay(retry: number, options: BackoffOptions = {}): number {
  requireRange("retry", retry, "a whole number of 0 or more", Number.isInteger(retry) && retry >= 0);
  return jittered(checkBackoff(options), retry);
}

function jittered(backoff: Required<BackoffOptions>, retry: number): number {
  const { minTimeout, multiplier, maxTimeout, jitter, random } = backoff;
  const base = Math.min(maxTimeout, minTimeout * multiplier ** retry);
  return jitter === 0 ? base : base * (1 + jitter * (2 * random() - 1));
}

/**
 * The checked policy as one function, its clock started: the wait before the attempt after failed attempt
 * `attempt`, or null when `error` is to be thrown (not retriable, the last attempt, or out of time). Calls
 * `onRetry` before answering a wait.
 */
function plan(options: RetryPolicyOptions): (error: unknown, attempt: number) => number | null {
  const backoff = checkBackoff(options);
  const { maxAttempts = 5, isRetriable = () => true, retryAfter = () => undefined, onRetry } = options;
  const { maxElapsed = Infinity, now = () => performance.now() } = options;
  requireRange(
    "maxAttempts",
    maxAttempts,
    "a whole number of 1 or more, or Infinity",
    maxAttempts >= 1 && (Number.isInteger(maxAttempts) || maxAttempts === Infinity),
  );
  requireRange("maxElapsed", maxElapsed, "a number of 0 or more (Infinity for no limit)", maxElapsed >= 0);
  for (const [name, value] of Object.entries({ isRetriable, retryAfter, onRetry, now })) {
    requireFunction(name, value);
  }
  const start = now();
  return (error, attempt) => {
    if (attempt >= maxAttempts || !isRetriable(error, attempt)) return null;
    const asked = retryAfter(error, attempt);
    if (asked !== undefined && !(asked >= 0 && asked < Infinity)) {
      throw new RangeError(
        `${CANNOT}: "retryAfter" must return a finite number of 0 or more or undefined, got ${asked} after attempt ${attempt}`,
      );
    }
    const wait = asked ?? jittered(backoff, attempt - 1);
    if (now() - start + wait > maxElapsed) return null;
    onRetry?.(error, attempt, wait);
    return wait;
  };
}

/**
 * Calls `fn` (with the attempt number, 1 first) until it resolves, and resolves with its value. A failure
 * that `isRetriable` accepts, before the last of `maxAttempts` and with time left within `maxElapsed`, is
 * followed by a wait (`retryAfter`'s, or the backoff) and another attempt; any other failure rejects with
 * that error as it is.
 * When `signal` aborts, no attempt starts and a wait ends at once: rejects with the signal's reason.
 * `TypeError` / `RangeError` (as a rejection) for bad options, before the first attempt.
 *
 * @example Three attempts, 100 ms then 200 ms apart
 * ```ts
 * const reply = await retry(() => fetch(url), { maxAttempts: 3, minTimeout: 100, signal });
 * ```
 */
export async function retry<T>(
  fn: (attempt: number) => Promise<T> | T,
  options: RetryOptions = {},
): Promise<T> {
  const { signal, delay = abortableDelay } = options;
  requireFunction("fn", fn ?? null);
  requireFunction("delay", delay);
  const next = plan(options);
  for (let attempt = 1;; attempt++) {
    if (signal?.aborted) throw abortError(signal, "Retrying");
    try {
      return await fn(attempt);
    } catch (error) {
      const wait = next(error, attempt);
      if (wait === null) throw error;
      // Raced with the signal too, so an injected wait that ignores it cannot hold the abort back.
      await abortable(delay(wait, signal), [signal]);
    }
  }
}

/** Blocks the thread for `ms`: the store's constructor has no event loop turn to wait in. */
function blockFor(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * {@linkcode retry} for a synchronous `fn`, waiting with a blocking `delay`: the same policy and the same
 * errors, without a signal. Only for code that cannot await (a constructor); it blocks the thread.
 */
export function retrySync<T>(fn: (attempt: number) => T, options: RetrySyncOptions = {}): T {
  const { delay = blockFor } = options;
  requireFunction("fn", fn ?? null);
  requireFunction("delay", delay);
  const next = plan(options);
  for (let attempt = 1;; attempt++) {
    try {
      return fn(attempt);
    } catch (error) {
      const wait = next(error, attempt);
      if (wait === null) throw error;
      delay(wait);
    }
  }
}
