/**
 * SQLite's `trace_events` table: the trace events of every process on the file, which the trace route pages
 * through. Written in batches, each one transaction. Private to `sqlite.ts`.
 * @module
 */
import type { TracePage, TracePageQuery, TraceRow, TraceTable } from "../trace/shared_trace.ts";
import { promised, type Statements, transaction } from "./_sqlite_sql.ts";

/** Reads and writes the file's trace events. */
export class SqliteTraceTable implements TraceTable {
  #sql: Statements;

  constructor(sql: Statements) {
    this.#sql = sql;
  }

  write(rows: readonly TraceRow[]): Promise<void> {
    return promised(() => {
      if (rows.length === 0) return;
      transaction(this.#sql, () => {
        for (const r of rows) this.#sql.insertTrace.run(r.user_id, r.session_id, r.run_id, r.ts, r.line);
      });
    });
  }

  prune(keep: number): Promise<void> {
    return promised(() => void transaction(this.#sql, () => this.#sql.pruneTrace.run(keep)));
  }

  page(query: TracePageQuery): Promise<TracePage> {
    const { userId, sessionId, since, runId, limit, cursor } = query;
    if (!(limit >= 1)) return Promise.reject(new RangeError(`limit must be at least 1, got ${limit}`));
    return promised(() => {
      const rows = this.#sql.traceAfter.all(userId, sessionId, since, runId, cursor ?? 0, limit + 1);
      const next = rows.length > limit ? rows[limit] : null;
      return {
        events: rows.slice(0, limit).map((row) => JSON.parse(row.line as string)),
        nextCursor: next && Number(next.id),
      };
    });
  }
}
