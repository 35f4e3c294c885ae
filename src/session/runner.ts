/**
 * The one way work runs on a session, for every caller (an HTTP turn or delete, a chat turn, a background
 * compaction): in this process's order for the session (its {@linkcode SessionQueue}: one at a time, a bounded
 * line), then under the session's lease ({@linkcode SessionLeases}: no other process works on it meanwhile,
 * renewed while the work runs, and a lost lease aborts the work's signal with a `LeaseLostError`).
 * @module
 */
import { type QueueFullError, TurnCancelledError } from "../errors.ts";
import { SessionQueue, type SessionQueueOptions } from "./queue.ts";
import type { HoldOptions, SessionLeases } from "./leases.ts";
import { type SessionKey, sessionName } from "../store/store.ts";

/** Options of {@linkcode SessionRunner}. */
export interface SessionRunnerOptions {
  /** The bounds of the session queue. @default {{}} (8 waiting per session, 1,024 sessions) */
  queue?: SessionQueueOptions;
  /** The leases works take. @default {undefined} (none: this process alone uses the database) */
  leases?: SessionLeases;
}

/** Options of {@linkcode SessionRunner.run}. */
export interface SessionRunOptions extends Pick<HoldOptions, "onWait"> {
  /** Drops the work while it waits (the run rejects with its reason); the work's signal follows it. */
  signal?: AbortSignal;
  /**
   * Whether the work waits its turn in the queue. A background compaction does not: it joins the lease of the
   * turn that started it, and the session's next turn does not wait for it. @default {true}
   */
  queued?: boolean;
  /** Whether the work takes the lease; not for a session in a private store. @default {true} */
  leased?: boolean;
  /**
   * The work's id (a turn's run id): such a work can be cancelled ({@linkcode SessionRunner.cancel}), here or
   * through its lease from another process; its signal then aborts with a `TurnCancelledError`.
   * @default {undefined} (not cancellable)
   */
  id?: string;
}

/** A cancellable work of a session, waiting or running. */
interface Cancellable {
  id: string;
  running: boolean;
  stop: AbortController;
}

/** Runs works on sessions: queued, then leased. */
export class SessionRunner {
  readonly #queue: SessionQueue;
  readonly #leases: SessionLeases | undefined;
  /** Cancellable works by session, in arrival order. */
  readonly #cancellable = new Map<string, Cancellable[]>();

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
    const { onWait, queued = true, leased = true, id } = options;
    const name = sessionName(key);
    const entry = id === undefined ? undefined : this.#track(name, id);
    const signal = entry === undefined ? options.signal : AbortSignal.any(
      options.signal === undefined ? [entry.stop.signal] : [options.signal, entry.stop.signal],
    );
    const onCancel = entry && (() => entry.stop.abort(new TurnCancelledError(key.sessionId)));
    const started = (signal: AbortSignal) => {
      if (entry !== undefined) entry.running = true;
      return work(signal);
    };
    const held = () =>
      leased && this.#leases !== undefined
        ? this.#leases.hold(key, started, { signal, onWait, onCancel })
        : started(signal ?? new AbortController().signal);
    const ran = queued ? this.#queue.run(name, held, { signal }) : held();
    return entry === undefined ? ran : ran.finally(() => this.#untrack(name, entry));
  }

  /**
   * Cancels the session's running work of id `id` (any running cancellable work when undefined), or a waiting
   * one of that id, in this process: its signal aborts with a `TurnCancelledError`. The id of the work
   * cancelled, or null when this process has none such.
   */
  cancel(key: SessionKey, id?: string): string | null {
    const works = this.#cancellable.get(sessionName(key)) ?? [];
    const found = works.find((work) => (id === undefined ? work.running : work.id === id));
    if (found === undefined || found.stop.signal.aborted) return null;
    found.stop.abort(new TurnCancelledError(key.sessionId));
    return found.id;
  }

  /** Whether a work of id `id` of the session waits or runs in this process. */
  has(key: SessionKey, id: string): boolean {
    return (this.#cancellable.get(sessionName(key)) ?? []).some((work) => work.id === id);
  }

  /**
   * Asks the process holding the session's lease to cancel its running cancellable work: true when a live
   * lease was marked (its holder sees it at its next renewal), false when none is held or there are no leases.
   * Rejects when the store does.
   */
  async cancelElsewhere(key: SessionKey): Promise<boolean> {
    return this.#leases === undefined ? false : await this.#leases.cancel(key);
  }

  #track(name: string, id: string): Cancellable {
    const entry = { id, running: false, stop: new AbortController() };
    const works = this.#cancellable.get(name);
    if (works === undefined) this.#cancellable.set(name, [entry]);
    else works.push(entry);
    return entry;
  }

  #untrack(name: string, entry: Cancellable): void {
    const works = (this.#cancellable.get(name) ?? []).filter((work) => work !== entry);
    if (works.length === 0) this.#cancellable.delete(name);
    else this.#cancellable.set(name, works);
  }
}
