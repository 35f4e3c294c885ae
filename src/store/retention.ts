/**
 * Retention: the database keeps trace events for AGENT_TRACE_RETENTION_DAYS, the claims of idempotency keys
 * for a day and, when AGENT_SESSION_RETENTION_DAYS is set, the sessions written to within that many days; a pass at an interval
 * deletes the rest in the background, a bounded batch or one session at a time, so a write lock is never held
 * for long and a turn waits at most for one batch.
 *
 * Every process on the database runs its own passes, with no lock among them: each delete is conditional, so
 * it is harmless when two processes run it at once. A trace batch deletes within a range of row ids the
 * events older than the cutoff (a second pruner finds them gone and stops); a session is deleted only under
 * its own lease, taken without waiting, so of two pruners one deletes it and the other leaves it, and never
 * while a turn runs on it. A lease under a reserved key would make one replica the pruner, but not the deletes
 * unconditional: a paused holder's lease expires while its statement still runs, so they would still have to
 * be harmless twice. It would save only the one batch a second pass reads to find nothing old, at the cost of
 * a second use of the lease table (a key outside the ids' rules, its expiry and renewal during a pass).
 * @module
 */
import { type Clock, SYSTEM_CLOCK } from "../clock.ts";
import type { TraceTable } from "../trace/shared_trace.ts";
import { processOwner } from "./store.ts";
import type { IdleCursor, SqlStore } from "./sql_store.ts";

/** A day in milliseconds. */
const DAY_MS = 24 * 60 * 60 * 1000;

/** What retention needs of a store's sessions: the idle ones, and deleting one whole. */
export type IdleSessions = Pick<SqlStore, "idleSessions" | "deleteIdleSession">;

/** What retention needs of a store's idempotency keys: deleting the claims past their day. */
export type OldRequests = Pick<SqlStore, "pruneRequests">;

/** What a store offers retention: its trace table, its sessions, its idempotency keys; null where it has none. */
export interface RetentionTarget {
  trace: Pick<TraceTable, "pruneOlder"> | null;
  sessions: IdleSessions | null;
  /** @default {null} */
  requests?: OldRequests | null;
}

/** Options of {@linkcode Retention}. */
export interface RetentionOptions {
  /** Days a trace event is kept (AGENT_TRACE_RETENTION_DAYS). @default {30} */
  traceDays?: number;
  /**
   * Days a session may go without a write before it is deleted (AGENT_SESSION_RETENTION_DAYS); null keeps
   * sessions forever. @default {null}
   */
  sessionDays?: number | null;
  /** Time between passes, in milliseconds, each jittered by ±25%. @default {3600000} */
  intervalMs?: number;
  /** Time from `start` to the first pass, in milliseconds, jittered by ±25%. @default {60000} */
  firstDelayMs?: number;
  /** Trace events per batch, and idle sessions listed per page. @default {500} */
  batch?: number;
  /**
   * Who takes a session's lease to delete it: an owner no turn of any process uses (a process's leases number
   * their takes from 1, so its `:0` is free), in the form that lets a process of the same host take the lease at
   * once when this one is gone. @default {`${processOwner()}:0`}
   */
  owner?: string;
  /** How long that lease lasts, in milliseconds (a delete is one transaction). @default {30000} */
  leaseTtlMs?: number;
  /** The cutoffs' time and the waits between passes. @default {SYSTEM_CLOCK} */
  clock?: Clock;
  /** A number in [0, 1) for the jitter of the waits. @default {Math.random} */
  random?: () => number;
  /** Gets one line when a pass fails, and one when a pass works again. @default {(line) => console.warn(line)} */
  warn?: (line: string) => void;
}

/** What one pass deleted. */
export interface RetentionPass {
  traceEvents: number;
  sessions: number;
  /** Claims of idempotency keys older than a day (`IDEMPOTENCY_KEEP_MS`), which count as absent already. */
  requests: number;
}

/** The ISO time `days` before `now`: what is older goes (the epoch for a span longer than time has run). */
function cutoff(now: number, days: number): string {
  return new Date(Math.max(0, now - days * DAY_MS)).toISOString();
}

/** Deletes, in the background, what the database keeps past its time. */
export class Retention {
  readonly #target: RetentionTarget;
  readonly #options: Required<RetentionOptions>;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #failing = false;

  /** @throws {RangeError} for a number out of its range (days and durations > 0, `batch` an integer >= 1). */
  constructor(target: RetentionTarget, options: RetentionOptions = {}) {
    const { traceDays = 30, sessionDays = null, intervalMs = 3_600_000, firstDelayMs = 60_000 } = options;
    const { batch = 500, owner = `${processOwner()}:0`, leaseTtlMs = 30_000, clock = SYSTEM_CLOCK } = options;
    const { random = Math.random, warn = (line: string) => console.warn(line) } = options;
    const positive = {
      traceDays,
      intervalMs,
      firstDelayMs,
      leaseTtlMs,
      ...(sessionDays === null ? {} : { sessionDays }),
    };
    for (const [name, value] of Object.entries(positive)) {
      if (!(value > 0) || !Number.isFinite(value)) {
        throw new RangeError(`Cannot create Retention: ${name} must be a finite number > 0, got ${value}`);
      }
    }
    if (!Number.isInteger(batch) || batch < 1) {
      throw new RangeError(`Cannot create Retention: batch must be an integer >= 1, got ${batch}`);
    }
    this.#target = target;
    this.#options = { ...positive, sessionDays, batch, owner, clock, random, warn };
  }

  /**
   * One pass, now: trace events older than the trace cutoff, claims of idempotency keys past their day, then
   * idle sessions. Between batches it yields to
   * other work, and stops when `signal` aborts (rejecting with its reason). Rejects when the database does,
   * leaving what it already deleted deleted.
   */
  async prune(signal?: AbortSignal): Promise<RetentionPass> {
    const { clock, traceDays, sessionDays } = this.#options;
    const pass: RetentionPass = { traceEvents: 0, sessions: 0, requests: 0 };
    const { trace, sessions, requests = null } = this.#target;
    if (trace !== null) {
      pass.traceEvents = await this.#pruneTrace(trace, cutoff(clock.now(), traceDays), signal);
    }
    if (requests !== null) pass.requests = await this.#pruneRequests(requests, clock.now(), signal);
    if (sessions !== null && sessionDays !== null) {
      pass.sessions = await this.#pruneSessions(sessions, cutoff(clock.now(), sessionDays), signal);
    }
    return pass;
  }

  /**
   * Deletes events older than `before`, walking the table from its lowest row id. Row ids follow the order
   * events were shipped in, which is about the order they were written, so the old ones come first and the
   * first batch without one ends the pass: no batch scans the table. An event shipped late (kept in memory
   * through a database outage) goes in the first pass after the events shipped before it are old too. Of two
   * processes walking at once, the one that finds a batch already deleted by the other stops; the other goes on.
   */
  async #pruneTrace(trace: NonNullable<RetentionTarget["trace"]>, before: string, signal?: AbortSignal) {
    let deleted = 0;
    for (let after = 0;;) {
      signal?.throwIfAborted();
      const batch = await trace.pruneOlder(before, after, this.#options.batch);
      deleted += batch.deleted;
      if (batch.last === null || batch.deleted === 0) return deleted;
      after = batch.last;
    }
  }

  /** Deletes the claims of idempotency keys past their day at `now`, a batch per transaction. */
  async #pruneRequests(requests: OldRequests, now: number, signal?: AbortSignal) {
    let deleted = 0;
    for (;;) {
      signal?.throwIfAborted();
      const batch = await requests.pruneRequests(now, this.#options.batch);
      deleted += batch;
      if (batch < this.#options.batch) return deleted;
    }
  }

  /** Deletes the sessions last written before `before`, one transaction each, listed a page at a time. */
  async #pruneSessions(sessions: IdleSessions, before: string, signal?: AbortSignal) {
    const { batch, owner, leaseTtlMs } = this.#options;
    let deleted = 0;
    let after: IdleCursor | undefined;
    for (;;) {
      signal?.throwIfAborted();
      const page = await sessions.idleSessions(before, batch, after);
      for (const session of page) {
        signal?.throwIfAborted();
        const key = { userId: session.userId, sessionId: session.id };
        if (await sessions.deleteIdleSession(key, before, owner, leaseTtlMs)) deleted++;
      }
      if (page.length < batch) return deleted;
      after = page[page.length - 1];
    }
  }

  /** Starts the passes: the first after `firstDelayMs`, then every `intervalMs`, until `close`. */
  start(): void {
    this.#loop ??= this.#run(this.#stop.signal);
  }

  async #run(signal: AbortSignal): Promise<void> {
    const { firstDelayMs, intervalMs, clock, random, warn } = this.#options;
    for (let wait = firstDelayMs;; wait = intervalMs) {
      try {
        await clock.sleep(wait * (0.75 + random() / 2), signal);
        await this.prune(signal);
      } catch (error) {
        if (signal.aborted) return;
        if (!this.#failing) {
          warn(
            `warning: cannot delete expired trace events or idle sessions (${(error as Error).message}); ` +
              "trying again at the next pass",
          );
        }
        this.#failing = true;
        continue;
      }
      if (this.#failing) warn("expired trace events and idle sessions are deleted again");
      this.#failing = false;
    }
  }

  /**
   * Stops the passes: a pass under way ends after its current batch (or session), which this awaits. Never
   * rejects.
   */
  async close(): Promise<void> {
    this.#stop.abort(new Error("retention closed"));
    await this.#loop;
  }
}
