/**
 * SharedTrace: the trace events this process writes, shipped in the background to the session database's
 * `trace_events` table (SQLite's or PostgreSQL's), which every process on that database shares; the trace
 * route's pages read back from it, so a session's trace is whole whichever process ran its turns. The JSONL
 * file stays each process's append-only audit log.
 * @module
 */
import { type Clock, SYSTEM_CLOCK } from "../clock.ts";

/** What {@linkcode TraceTable.page} selects. */
export interface TracePageQuery {
  userId: string;
  sessionId: string;
  /** Only events whose `ts` is at or after this ISO time (the session's creation). */
  since: string;
  /** Only events of this run, or of every run when null. */
  runId: string | null;
  /** Events per page, at least 1. */
  limit: number;
  /** Where to start (a `nextCursor`), or null for the oldest event. */
  cursor: number | null;
}

/** One page of events, oldest first, and where the next page starts (null on the last page). */
export interface TracePage {
  events: Record<string, unknown>[];
  /** The next event's row id. */
  nextCursor: number | null;
  /**
   * Where a later read of what comes after this page's last event starts (its row id + 1), also on the last
   * page: a follower polls from it. Null for an empty page.
   */
  endCursor: number | null;
}

/** Which session {@linkcode TracePages.latest} looks at. */
export type TraceLatestQuery = Pick<TracePageQuery, "userId" | "sessionId" | "since">;

/** Where the trace route reads pages. */
export interface TracePages {
  /** One page of a session's events, oldest first. */
  page(query: TracePageQuery): Promise<TracePage>;
  /** The session's newest event (since its creation), or null when it has none. */
  latest(query: TraceLatestQuery): Promise<Record<string, unknown> | null>;
}

/** A database's `trace_events` table. */
export interface TraceTable extends TracePages {
  /** Stores the events' rows in order; rejects when the database does. */
  write(rows: readonly TraceRow[]): Promise<void>;
  /** Deletes all but about the newest `keep` events (by row id); rejects when the database does. */
  prune(keep: number): Promise<void>;
  /**
   * One batch of a retention pass: of the (at most) `limit` events after row id `after`, lowest row id first,
   * deletes those whose `ts` is before `before` (an ISO time). Harmless when two processes run it at once.
   * Rejects when the database does.
   */
  pruneOlder(before: string, after: number, limit: number): Promise<TraceBatch>;
}

/** What {@linkcode TraceTable.pruneOlder} did. */
export interface TraceBatch {
  /** The batch's last row id, where the next one starts; null when there was no event after `after`. */
  last: number | null;
  /** How many of its events it deleted. */
  deleted: number;
}

/** A `trace_events` row: the event's ids and time, and the event as its JSON line. */
export interface TraceRow {
  user_id: string;
  session_id: string;
  run_id: string;
  ts: string;
  line: string;
}

/**
 * The row of an event that names its user, session, run and time, or null (it is no session's); `line` is its
 * JSON when the caller has it already.
 */
export function traceRow(event: Record<string, unknown>, line?: string): TraceRow | null {
  const { user_id, session_id, run_id, ts } = event;
  if ([user_id, session_id, run_id, ts].some((field) => typeof field !== "string")) return null;
  if (Number.isNaN(Date.parse(ts as string))) return null;
  return { user_id, session_id, run_id, ts, line: line ?? JSON.stringify(event) } as TraceRow;
}

/** Options of {@linkcode SharedTrace}. */
export interface SharedTraceOptions {
  /**
   * How long an event may wait for others to ship with, in milliseconds; 0 ships at once (a round trip to a
   * server batches what comes meanwhile by itself). A page or `close` ships at once. @default {0}
   */
  delayMs?: number;
  /** Events kept while the table cannot be written; past that the newest are dropped. @default {10000} */
  maxQueued?: number;
  /** The waits of `delayMs`. @default {SYSTEM_CLOCK} */
  clock?: Clock;
  /**
   * Events the table keeps (AGENT_TRACE_TABLE_MAX_EVENTS): after every `min(maxEvents, 1000)` shipped, the
   * older ones are deleted, so it holds at most about that many more. @default {1000000}
   */
  maxEvents?: number;
  /** Gets one line when shipping fails, and one when it works again. @default {(line) => console.warn(line)} */
  warn?: (line: string) => void;
}

/** Ships events to the shared table one batch at a time, in the order they were written. */
export class SharedTrace implements TracePages {
  #table: TraceTable;
  #options: Required<SharedTraceOptions>;
  /** Events shipped since the last prune. */
  #sincePrune = 0;
  /** Ends the wait of `delayMs` under way. */
  #window: AbortController | undefined;
  #queue: TraceRow[] = [];
  #shipping: Promise<void> | null = null;
  #failing = false;
  #dropped = 0;

  constructor(table: TraceTable, options: SharedTraceOptions = {}) {
    const { delayMs = 0, maxQueued = 10_000, warn = (line: string) => console.warn(line) } = options;
    const { clock = SYSTEM_CLOCK, maxEvents = 1_000_000 } = options;
    this.#table = table;
    this.#options = { delayMs, maxQueued, warn, clock, maxEvents };
  }

  /**
   * Queues an event as the tracer wrote it (its `onAppend`: the event and its JSON line) and starts shipping;
   * an event of no session is left out. Never throws.
   */
  add(event: Record<string, unknown>, line?: string): void {
    const row = traceRow(event, line);
    if (row === null) return;
    if (this.#queue.length >= this.#options.maxQueued) {
      this.#dropped += 1;
      return;
    }
    this.#queue.push(row);
    if (this.#options.delayMs === 0) this.#start();
    else if (this.#window === undefined) {
      const window = this.#window = new AbortController();
      this.#options.clock.sleep(this.#options.delayMs, window.signal).then(() => this.#start(), () => {});
    }
  }

  #start(): void {
    this.#window?.abort();
    this.#window = undefined;
    this.#shipping ??= this.#ship().finally(() => {
      this.#shipping = null;
      // An event queued while the last batch was finishing: go on (after a failure, the next event retries).
      if (this.#queue.length > 0 && !this.#failing) this.#start();
    });
  }

  /** Resolves once what was queued so far is shipped, or failed to be (it is retried with the next event). */
  async flushed(): Promise<void> {
    if (this.#window !== undefined) this.#start();
    while (this.#shipping !== null) await this.#shipping;
  }

  /** The session's events from the shared table, this process's queued ones shipped first. */
  async page(query: TracePageQuery): Promise<TracePage> {
    await this.flushed();
    return await this.#table.page(query);
  }

  /** The session's newest event in the shared table, this process's queued ones shipped first. */
  async latest(query: TraceLatestQuery): Promise<Record<string, unknown> | null> {
    await this.flushed();
    return await this.#table.latest(query);
  }

  /** Ships what is queued, once more if it failed before. Never rejects. */
  async close(): Promise<void> {
    await this.flushed();
    if (this.#queue.length > 0) {
      this.#failing = false;
      this.#start();
      await this.flushed();
    }
  }

  async #ship(): Promise<void> {
    while (this.#queue.length > 0) {
      const batch = this.#queue.slice(0, 500);
      try {
        await this.#table.write(batch);
        this.#sincePrune += batch.length;
        if (this.#sincePrune >= Math.min(this.#options.maxEvents, 1000)) {
          this.#sincePrune = 0;
          await this.#table.prune(this.#options.maxEvents);
        }
      } catch (error) {
        if (!this.#failing) {
          this.#options.warn(
            `warning: cannot ship trace events to the database (${(error as Error).message}); ` +
              "they are kept in memory and in the trace file, and shipped once it answers",
          );
        }
        this.#failing = true;
        return;
      }
      this.#queue.splice(0, batch.length);
      if (this.#failing || this.#dropped > 0) {
        const dropped = this.#dropped > 0 ? ` (${this.#dropped} events were dropped meanwhile)` : "";
        this.#options.warn(`trace events reach the database again${dropped}`);
        this.#failing = false;
        this.#dropped = 0;
      }
    }
  }
}
