/**
 * SQLite's `trace_events` table: the trace events of every process on the file, which the trace route pages
 * through. Written in batches, each one transaction. Private to `sqlite.ts`.
 * @module
 */
import type {
  TraceBatch,
  TraceLatestQuery,
  TracePage,
  TracePageQuery,
  TraceRow,
  TraceTable,
} from "../trace/shared_trace.ts";
import { type Statements, transaction } from "./_sqlite_sql.ts";

/** Runs work on the connection when the store's work before it has ended. */
type Exclusive = <T>(work: () => T) => Promise<T>;

/** Reads and writes the file's trace events. */
export class SqliteTraceTable implements TraceTable {
  #sql: Statements;
  #exclusive: Exclusive;

  constructor(sql: Statements, exclusive: Exclusive) {
    this.#sql = sql;
    this.#exclusive = exclusive;
  }

  write(rows: readonly TraceRow[]): Promise<void> {
    return this.#exclusive(() => {
      if (rows.length === 0) return;
      transaction(this.#sql, () => {
        for (const r of rows) this.#sql.insertTrace.run(r.user_id, r.session_id, r.run_id, r.ts, r.line);
      });
    });
  }

  prune(keep: number): Promise<void> {
    return this.#exclusive(() => void transaction(this.#sql, () => this.#sql.pruneTrace.run(keep)));
  }

  pruneOlder(before: string, after: number, limit: number): Promise<TraceBatch> {
    return this.#exclusive(() => {
      const last = this.#sql.traceBatchEnd.get(after, limit)?.last;
      if (last === null || last === undefined) return { last: null, deleted: 0 };
      // The write lock is held for one range of at most `limit` rows of the primary key.
      const { changes } = transaction(this.#sql, () => this.#sql.pruneTraceOlder.run(after, last, before));
      return { last: Number(last), deleted: Number(changes) };
    });
  }

  page(query: TracePageQuery): Promise<TracePage> {
    const { userId, sessionId, since, runId, limit, cursor } = query;
    if (!(limit >= 1)) return Promise.reject(new RangeError(`limit must be at least 1, got ${limit}`));
    return this.#exclusive(() => {
      const rows = this.#sql.traceAfter.all(userId, sessionId, since, runId, cursor ?? 0, limit + 1);
      const next = rows.length > limit ? rows[limit] : null;
      const last = rows.slice(0, limit).at(-1);
      return {
        events: rows.slice(0, limit).map((row) => JSON.parse(row.line as string)),
        nextCursor: next && Number(next.id),
        endCursor: last === undefined ? null : Number(last.id) + 1,
      };
    });
  }

  latest(query: TraceLatestQuery): Promise<Record<string, unknown> | null> {
    return this.#exclusive(() => {
      const row = this.#sql.traceLatest.get(query.userId, query.sessionId, query.since);
      return row === undefined ? null : JSON.parse(row.line as string);
    });
  }
}
