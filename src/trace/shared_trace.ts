/**
 * SharedTrace: the trace events this process writes, shipped in the background to a table every replica
 * shares (PostgreSQL's `trace_events`), and the trace route's pages read back from it, so a session's trace
 * is whole whichever replica ran its turns. The JSONL file stays each process's local audit log.
 * @module
 */
import type { TracePage, TracePageQuery, TracePages } from "./reader.ts";

/** The shared table, as {@linkcode SharedTrace} uses it. */
export interface TraceTableLike {
  /** Stores events in order; rejects when the database does. */
  write(events: readonly Record<string, unknown>[]): Promise<void>;
  page(query: TracePageQuery): Promise<TracePage>;
}

/** Options of {@linkcode SharedTrace}. */
export interface SharedTraceOptions {
  /** Events kept while the table cannot be written; past that the newest are dropped. @default {10000} */
  maxQueued?: number;
  /** Gets one line when shipping fails, and one when it works again. @default {(line) => console.error(line)} */
  warn?: (line: string) => void;
}

/** Ships events to the shared table one batch at a time, in the order they were written. */
export class SharedTrace implements TracePages {
  #table: TraceTableLike;
  #maxQueued: number;
  #warn: (line: string) => void;
  #queue: Record<string, unknown>[] = [];
  #shipping: Promise<void> | null = null;
  #failing = false;
  #dropped = 0;

  constructor(table: TraceTableLike, options: SharedTraceOptions = {}) {
    const { maxQueued = 10_000, warn = (line: string) => console.error(line) } = options;
    this.#table = table;
    this.#maxQueued = maxQueued;
    this.#warn = warn;
  }

  /** Queues an event as the tracer wrote it (its `onAppend`) and starts shipping. Never throws. */
  add(event: Record<string, unknown>): void {
    if (this.#queue.length >= this.#maxQueued) {
      this.#dropped += 1;
      return;
    }
    this.#queue.push(event);
    this.#start();
  }

  #start(): void {
    this.#shipping ??= this.#ship().finally(() => {
      this.#shipping = null;
      // An event queued while the last batch was finishing: go on (after a failure, the next event retries).
      if (this.#queue.length > 0 && !this.#failing) this.#start();
    });
  }

  /** Resolves once what was queued so far is shipped, or failed to be (it is retried with the next event). */
  async flushed(): Promise<void> {
    while (this.#shipping !== null) await this.#shipping;
  }

  /** The session's events from the shared table, this process's queued ones shipped first. */
  async page(query: TracePageQuery): Promise<TracePage> {
    await this.flushed();
    return await this.#table.page(query);
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
      } catch (error) {
        if (!this.#failing) {
          this.#warn(
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
        this.#warn(`trace events reach the database again${dropped}`);
        this.#failing = false;
        this.#dropped = 0;
      }
    }
  }
}
