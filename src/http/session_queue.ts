/**
 * One turn per session at a time, in arrival order; sessions run concurrently. The wait line is bounded, and
 * a waiting turn whose client went away is dropped before it starts.
 * @module
 */
import { abortError } from "../abort.ts";
import { HttpError } from "./errors.ts";

/** Options of {@linkcode SessionQueue}. */
export interface SessionQueueOptions {
  /**
   * Most turns allowed to wait per key, not counting the running one; one more is rejected with a 429.
   * @default {8}
   */
  maxWaiting?: number;
}

/** Options of {@linkcode SessionQueue.run}. */
export interface RunOptions {
  /**
   * Drops the task while it waits (`run` rejects with its reason); a started task must watch it itself.
   * @default {undefined}
   */
  signal?: AbortSignal;
}

// Before any turn has finished, a guess at how long one takes.
const INITIAL_TURN_MS = 1000;
const MAX_RETRY_AFTER_SECONDS = 60;

/**
 * Runs tasks one at a time per key (a session), in call order. A failing task rejects only its own `run`.
 * Idle keys are forgotten, so memory is bounded by the keys in use.
 */
export class SessionQueue {
  #maxWaiting: number;
  // A key is present exactly while one of its tasks runs; the array holds the starters of those waiting.
  #lanes = new Map<string, (() => void)[]>();
  #active = 0;
  #idle: (() => void)[] = [];
  #averageTurnMs = INITIAL_TURN_MS;

  /** @throws {RangeError} when `maxWaiting` is not a non-negative integer. */
  constructor(options: SessionQueueOptions = {}) {
    const { maxWaiting = 8 } = options;
    if (!Number.isInteger(maxWaiting) || maxWaiting < 0) {
      throw new RangeError(
        `Cannot create SessionQueue: maxWaiting must be a non-negative integer, got ${maxWaiting}`,
      );
    }
    this.#maxWaiting = maxWaiting;
  }

  /** Tasks running now, across all keys. */
  get active(): number {
    return this.#active;
  }

  /** Keys with a task running or waiting; 0 once everything has settled. */
  get size(): number {
    return this.#lanes.size;
  }

  /** Tasks of `key` waiting to start, not counting the running one. */
  waiting(key: string): number {
    return this.#lanes.get(key)?.length ?? 0;
  }

  /** The 429 `run` would reject with for `key` now, or null: for an SSE response, which cannot change status. */
  rejection(key: string): HttpError | null {
    const waiting = this.#lanes.get(key);
    if (waiting === undefined || waiting.length < this.#maxWaiting) return null;
    return new HttpError(
      429,
      "too_many_requests",
      `Cannot queue turn: the session already has ${waiting.length} turns waiting`,
      { headers: { "Retry-After": String(this.#retryAfterSeconds()) } },
    );
  }

  /**
   * Runs `task` once every earlier task of `key` has settled, and settles as it does. Rejects without
   * starting it when the signal aborts first, or with a 429 (`Retry-After` from the average turn, 1–60 s)
   * when `maxWaiting` tasks of `key` already wait.
   */
  run<T>(key: string, task: () => Promise<T>, options: RunOptions = {}): Promise<T> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortError(signal, "Cannot run turn: waiting"));
    const full = this.rejection(key);
    if (full !== null) return Promise.reject(full);
    const waiting = this.#lanes.get(key);
    return new Promise<T>((resolve, reject) => {
      const start = () => {
        signal?.removeEventListener("abort", onAbort);
        this.#active++;
        const startedAt = performance.now();
        // Release the key before settling, so whoever awaits `run` already sees the queue without this task.
        new Promise<T>((run) => run(task()))
          .finally(() => this.#finish(key, performance.now() - startedAt))
          .then(resolve, reject);
      };
      const onAbort = () => {
        // Still waiting (a started task has removed this listener): the key is present and holds `start`.
        const queue = this.#lanes.get(key)!;
        queue.splice(queue.indexOf(start), 1);
        reject(abortError(signal!, "Cannot run turn: waiting"));
      };
      if (waiting === undefined) {
        this.#lanes.set(key, []);
        start();
      } else {
        signal?.addEventListener("abort", onAbort, { once: true });
        waiting.push(start);
      }
    });
  }

  /** Resolves once no task runs or waits (at once if none does); for graceful shutdown. Never rejects. */
  idle(): Promise<void> {
    if (this.#active === 0 && this.#lanes.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #finish(key: string, durationMs: number): void {
    this.#active--;
    this.#averageTurnMs = 0.8 * this.#averageTurnMs + 0.2 * durationMs;
    const next = this.#lanes.get(key)!.shift();
    if (next !== undefined) {
      next();
      return;
    }
    this.#lanes.delete(key);
    if (this.#active === 0 && this.#lanes.size === 0) {
      for (const resolve of this.#idle.splice(0)) resolve();
    }
  }

  /** A slot frees when the running turn ends: about one average turn, in whole seconds. */
  #retryAfterSeconds(): number {
    return Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(1, Math.ceil(this.#averageTurnMs / 1000)));
  }
}
