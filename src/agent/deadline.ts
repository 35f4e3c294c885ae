/**
 * The wall-clock deadline of a whole turn (AGENT_TURN_TIMEOUT_SECONDS): a signal that aborts the turn's model
 * calls, tools and further steps once the time is up, on the agent's clock, so tests move time instead of
 * waiting for it.
 * @module
 */
import { type Clock, SYSTEM_CLOCK } from "../clock.ts";

/** The name of the abort reason a passed deadline gives, as `AbortSignal.timeout()` names its own. */
export const DEADLINE_REASON = "TimeoutError";

/** Options of {@linkcode TurnDeadline}. */
export interface TurnDeadlineOptions {
  /** What else stops the turn (a client gone, Ctrl-C, shutdown). @default {undefined} */
  signal?: AbortSignal;
  /** Where the deadline waits. @default {SYSTEM_CLOCK} */
  clock?: Clock;
}

/**
 * A turn's deadline, `seconds` from now (null: none). `signal` aborts when the turn's own signal does or the
 * deadline passes, whose reason is then a `DOMException` named {@linkcode DEADLINE_REASON}. Dispose of it when
 * the turn ends: its wait is cancelled, leaving no timer behind.
 */
export class TurnDeadline {
  /** Aborts the turn: its own signal's abort, or the deadline's. */
  readonly signal: AbortSignal | undefined;
  /** Cancels the wait; none without a deadline. */
  readonly #cancel: AbortController | null = null;

  /** @throws {RangeError} when `seconds` is neither null nor a finite number > 0. */
  constructor(seconds: number | null, options: TurnDeadlineOptions = {}) {
    const { signal, clock = SYSTEM_CLOCK } = options;
    if (seconds === null) {
      this.signal = signal;
      return;
    }
    if (!(seconds > 0) || !Number.isFinite(seconds)) {
      throw new RangeError(
        `Cannot set a turn's deadline: seconds must be a finite number > 0, got ${seconds}`,
      );
    }
    const passed = new AbortController();
    this.signal = signal === undefined ? passed.signal : AbortSignal.any([signal, passed.signal]);
    const why = `it passed its time limit of ${seconds} s (AGENT_TURN_TIMEOUT_SECONDS)`;
    this.#cancel = new AbortController();
    clock.sleep(seconds * 1000, this.#cancel.signal).then(
      () => passed.abort(new DOMException(why, DEADLINE_REASON)),
      () => {}, // cancelled: the turn ended first
    );
  }

  [Symbol.dispose](): void {
    // With a reason of its own: an abort without one builds a DOMException, and nobody reads this one.
    this.#cancel?.abort(TURN_ENDED);
  }
}

/** Why the wait of a deadline is cancelled: the turn ended first. */
const TURN_ENDED = "the turn ended";

/** Whether `reason` (an abort signal's) is a passed deadline's. */
export function isDeadline(reason: unknown): reason is DOMException {
  return reason instanceof DOMException && reason.name === DEADLINE_REASON;
}
