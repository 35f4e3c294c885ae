/**
 * Compactions that run after a turn's answer, off the turn's path: at most one per session at a time (across
 * processes too, when they run under the session's lease), their events sent to the trace, and a shutdown that
 * waits for them (abandoning them after a grace period).
 * @module
 */
import { delay } from "../abort.ts";
import type { EventSink } from "../events.ts";
import { SessionRunner } from "./runner.ts";
import { type SessionKey, sessionName } from "../store/store.ts";
import type { BackgroundCompactions as Compactions, BackgroundJob } from "../memory/turn_memory.ts";

/** Options of {@linkcode BackgroundCompactions}. */
export interface BackgroundCompactionsOptions {
  /**
   * Runs each compaction under the session's lease (not in its queue): started by a turn, it keeps the turn's
   * lease until it ends, so no other process's turn or compaction runs on the session meanwhile.
   * @default {new SessionRunner()} (no lease)
   */
  sessions?: Pick<SessionRunner, "run">;
}

/** Runs each session's background compaction; `src/runtime.ts` closes it before the store. */
export class BackgroundCompactions implements Compactions {
  readonly #emit: EventSink;
  readonly #sessions: Pick<SessionRunner, "run">;
  readonly #running = new Map<string, Promise<void>>();
  readonly #stop = new AbortController();
  #closed = false;

  /** `emit` receives the jobs' events: the trace, never a live view (the prompt may be back by then). */
  constructor(emit: EventSink, options: BackgroundCompactionsOptions = {}) {
    this.#emit = emit;
    this.#sessions = options.sessions ?? new SessionRunner();
  }

  /**
   * Starts `job` for the session once the current task is done, so the answer is delivered first. False,
   * doing nothing, when the session already has one running (the next turn starts another if still due)
   * or shutdown has begun.
   */
  start(key: SessionKey, job: BackgroundJob): boolean {
    const id = sessionName(key);
    if (this.#closed || this.#running.has(id)) return false;
    const signal = this.#stop.signal;
    const work = (stop: AbortSignal) => delay(0).then(() => job(this.#emit, stop));
    // Taken now, while the turn that starts it still holds the lease: the compaction keeps it.
    const run = this.#sessions.run(key, work, { signal, queued: false })
      // A job reports its own failures as events; a rejection here is a bug or a store that cannot take the
      // lease, and must not end the process. Stopped while waiting for the lease, it has nothing to say.
      .catch((error) => {
        if (!signal.aborted) console.error(`background compaction failed: ${error}`);
      })
      .finally(() => this.#running.delete(id));
    this.#running.set(id, run);
    return true;
  }

  /** How many compactions are running. */
  get running(): number {
    return this.#running.size;
  }

  /** Resolves once no compaction is running, including any started meanwhile. */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.all(this.#running.values());
  }

  /**
   * Takes no more work and waits for what runs; after `graceMs` it aborts them, which abandons each
   * compaction with its session unchanged (its summary call is cancelled, nothing is stored).
   */
  async close(graceMs = Infinity): Promise<void> {
    this.#closed = true;
    const timer = Number.isFinite(graceMs)
      ? setTimeout(() => this.#stop.abort(new Error("shutting down")), graceMs)
      : undefined;
    try {
      await this.idle();
    } finally {
      clearTimeout(timer);
    }
  }
}
