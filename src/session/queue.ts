/**
 * One work per session at a time in this process, in arrival order; sessions run concurrently. The wait line
 * is bounded, so is the number of sessions with works in it, and a waiting work whose client went away is
 * dropped before it starts. Used through {@linkcode SessionRunner} (`runner.ts`).
 * @module
 */
import { abortError } from "../abort.ts";
import { QueueFullError } from "../errors.ts";
import { bindContext } from "../telemetry.ts";

/** Options of {@linkcode SessionQueue}. */
export interface SessionQueueOptions {
  /** Most tasks allowed to wait per key besides the running one; one more is refused. @default {8} */
  maxWaiting?: number;
  /** Most keys with a task running or waiting; a task of one more key is refused. @default {1024} */
  maxKeys?: number;
}

/** Options of {@linkcode SessionQueue.run}. */
export interface RunOptions {
  /** Aborting drops the task if it still waits (`run` rejects with its reason). @default {undefined} */
  signal?: AbortSignal;
}

/**
 * Runs tasks one at a time per key (a session), in call order. A failing task rejects only its own `run`.
 * Idle keys are forgotten: at most `maxKeys` keys of at most `1 + maxWaiting` tasks each are held.
 */
export class SessionQueue {
  #maxWaiting: number;
  #maxKeys: number;
  // A key is present exactly while one of its tasks runs; the array holds the starters of those waiting.
  #lanes = new Map<string, (() => void)[]>();
  #active = 0;
  // Before any turn has finished, a guess at how long one takes.
  #averageTurnMs = 1000;

  /** @throws {RangeError} when `maxWaiting` is not a non-negative integer or `maxKeys` a positive one. */
  constructor(options: SessionQueueOptions = {}) {
    const { maxWaiting = 8, maxKeys = 1024 } = options;
    if (!Number.isInteger(maxWaiting) || maxWaiting < 0) {
      throw new RangeError(
        `Cannot create SessionQueue: maxWaiting must be a non-negative integer, got ${maxWaiting}`,
      );
    }
    if (!Number.isInteger(maxKeys) || maxKeys < 1) {
      throw new RangeError(`Cannot create SessionQueue: maxKeys must be a positive integer, got ${maxKeys}`);
    }
    this.#maxWaiting = maxWaiting;
    this.#maxKeys = maxKeys;
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

  /**
   * What `run` would reject `key` with now, or null: asked first by an SSE response, which cannot change
   * status later. Full for the session when it has `maxWaiting` tasks waiting, for the process when `maxKeys`
   * other keys have tasks in the queue; the retry is about one average task away (when the running one frees
   * a slot), 1–60 s.
   */
  rejection(key: string): QueueFullError | null {
    const waiting = this.#lanes.get(key);
    const full = waiting === undefined
      ? this.#lanes.size >= this.#maxKeys
      : waiting.length >= this.#maxWaiting;
    if (!full) return null;
    const retryAfterSeconds = Math.min(60, Math.max(1, Math.ceil(this.#averageTurnMs / 1000)));
    if (waiting === undefined) {
      const message = `Cannot queue turn: turns of ${this.#lanes.size} sessions are running or waiting`;
      return new QueueFullError(message, "process", retryAfterSeconds);
    }
    const message = `Cannot queue turn: the session already has ${waiting.length} turns waiting`;
    return new QueueFullError(message, "session", retryAfterSeconds);
  }

  /**
   * Runs `task` once every earlier task of `key` has settled, and settles as it does. Rejects without
   * starting it when the signal aborts first, or with {@linkcode SessionQueue.rejection}'s error.
   */
  run<T>(key: string, task: () => Promise<T>, options: RunOptions = {}): Promise<T> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortError(signal, "Cannot run turn: waiting"));
    const full = this.rejection(key);
    if (full !== null) return Promise.reject(full);
    const waiting = this.#lanes.get(key);
    return new Promise<T>((resolve, reject) => {
      // A waiting task is started by the one before it: bound, it keeps this request's span context.
      const start = bindContext(() => {
        signal?.removeEventListener("abort", onAbort);
        this.#active++;
        const startedAt = performance.now();
        // Release the key before settling, so whoever awaits `run` already sees the queue without this task.
        new Promise<T>((run) => run(task()))
          .finally(() => this.#finish(key, performance.now() - startedAt))
          .then(resolve, reject);
      });
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

  #finish(key: string, durationMs: number): void {
    this.#active--;
    this.#averageTurnMs = 0.8 * this.#averageTurnMs + 0.2 * durationMs;
    const next = this.#lanes.get(key)!.shift();
    if (next === undefined) this.#lanes.delete(key);
    else next();
  }
}
