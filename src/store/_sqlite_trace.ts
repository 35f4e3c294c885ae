/**
 * SQLite's `trace_events` table: the trace events of every process on the file, which the trace route pages
 * through. Written in batches, each one transaction. Private to `sqlite.ts`.
 * @module
 */
import type { TracePage, TracePageQuery, TraceRow, TraceTable } from "../trace/shared_trace.ts";
import { type Statements, transaction } from "./_sqlite_sql.ts";

/** Reads and writes the file's trace events. */
export class SqliteTraceTable implements TraceTable {
  #sql: Statements;

  constructor(sql: Statements) {
    this.#sql = sql;
  }

  write(rows: readonly TraceRow[]): Promise<void> {
    try {
      if (rows.length > 0) {
        transaction(this.#sql, () => {
          for (const r of rows) this.#sql.insertTrace.run(r.user_id, r.session_id, r.run_id, r.ts, r.line);
        });
      }
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  prune(keep: number): Promise<void> {
    try {
      transaction(this.#sql, () => this.#sql.pruneTrace.run(keep));
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  page(query: TracePageQuery): Promise<TracePage> {
    const { userId, sessionId, since, runId, limit, cursor } = query;
    if (!(limit >= 1)) return Promise.reject(new RangeError(`limit must be at least 1, got ${limit}`));
    try {
      const rows = this.#sql.traceAfter.all(userId, sessionId, since, runId, cursor ?? 0, limit + 1);
      const next = rows.length > limit ? rows[limit] : null;
      return Promise.resolve({
        events: rows.slice(0, limit).map((row) => JSON.parse(row.line as string)),
        nextCursor: next && Number(next.id),
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }
}
