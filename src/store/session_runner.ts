/**
 * The one way work runs on a session, for every caller (an HTTP turn or delete, a chat turn, a background
 * compaction): in this process's order for the session (its {@linkcode SessionQueue}: one at a time, a bounded
 * line), then under the session's lease ({@linkcode SessionLeases}: no other process works on it meanwhile,
 * renewed while the work runs, and a lost lease aborts the work's signal with a `LeaseLostError`).
 * @module
 */
import type { QueueFullError } from "../errors.ts";
import { SessionQueue, type SessionQueueOptions } from "./session_queue.ts";
import type { SessionLeases } from "./session_leases.ts";
import { type SessionKey, sessionName } from "./store.ts";

/** Options of {@linkcode SessionRunner}. */
export interface SessionRunnerOptions {
  /** The bounds of the session queue. @default {{}} (8 waiting per session, 1,024 sessions) */
  queue?: SessionQueueOptions;
  /** The leases works take. @default {undefined} (none: this process alone uses the database) */
  leases?: SessionLeases;
}

/** Options of {@linkcode SessionRunner.run}. */
export interface SessionRunOptions {
  /** Drops the work while it waits (the run rejects with its reason); the work's signal follows it. */
  signal?: AbortSignal;
  /** Called once if another process holds the lease, before waiting for it. @default {undefined} */
  onWait?: () => void;
  /**
   * Whether the work waits its turn in the queue. A background compaction does not: it joins the lease of the
   * turn that started it, and the session's next turn does not wait for it. @default {true}
   */
  queued?: boolean;
  /** Whether the work takes the lease; not for a session in a private store. @default {true} */
  leased?: boolean;
}

/** Runs works on sessions: queued, then leased. */
export class SessionRunner {
  readonly #queue: SessionQueue;
  readonly #leases: SessionLeases | undefined;

  /** @throws {RangeError} for queue bounds that are not integers in range (see {@linkcode SessionQueue}). */
  constructor(options: SessionRunnerOptions = {}) {
    this.#queue = new SessionQueue(options.queue);
    this.#leases = options.leases;
  }

  /** Works running now, across sessions. */
  get active(): number {
    return this.#queue.active;
  }

  /** Sessions with a work running or waiting; 0 once everything has settled. */
  get size(): number {
    return this.#queue.size;
  }

  /** Works of the session waiting behind the running one. */
  waiting(key: SessionKey): number {
    return this.#queue.waiting(sessionName(key));
  }

  /** What a queued {@linkcode SessionRunner.run} of the session would be refused with now, or null. */
  rejection(key: SessionKey): QueueFullError | null {
    return this.#queue.rejection(sessionName(key));
  }

  /**
   * Runs `work` once its turn in the queue has come and this process holds the session's lease, and settles
   * as it does. `work`'s signal aborts with `options.signal` or a `LeaseLostError`. Rejects without running
   * `work` when `options.signal` aborts first, with a `QueueFullError`, or when the store cannot take the
   * lease.
   */
  run<T>(
    key: SessionKey,
    work: (signal: AbortSignal) => Promise<T>,
    options: SessionRunOptions = {},
  ): Promise<T> {
    const { signal, onWait, queued = true, leased = true } = options;
    const held = () =>
      leased && this.#leases !== undefined
        ? this.#leases.hold(key, work, { signal, onWait })
        : work(signal ?? new AbortController().signal);
    return queued ? this.#queue.run(sessionName(key), held, { signal }) : held();
  }
}
