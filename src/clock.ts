/**
 * Time as a dependency: what reads the time or waits takes a {@linkcode Clock}, so tests drive it with a fake
 * one and assert exact moments instead of counting work in wall-clock windows.
 * @module
 */
import { delay } from "./abort.ts";

/** The time and the waits of whatever takes it. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts, leaving nothing behind. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The real clock: `Date.now()` and timers. */
export const SYSTEM_CLOCK: Clock = Object.freeze({ now: () => Date.now(), sleep: delay });
