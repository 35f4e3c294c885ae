/**
 * The `trace_events` table: every replica's trace events, so the trace route of any replica pages through a
 * session's events whichever replica ran them. Private to `postgres.ts`.
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
import type { Sql } from "./_postgres_client.ts";

/** Rows inserted per statement. */
const BATCH = 500;

/** A run of the store's: `work`, its failure reported as the store reports it. */
type Run = <T>(action: string, work: () => Promise<T>) => Promise<T>;

/** Reads and writes the database's trace events. */
export class PostgresTraceTable implements TraceTable {
  #sql: Sql;
  #run: Run;

  constructor(sql: Sql, run: Run) {
    this.#sql = sql;
    this.#run = run;
  }

  /** Inserts sessions' events (as the tracer wrote them: clipped and redacted), in order. */
  write(rows: readonly TraceRow[]): Promise<void> {
    return this.#run("write trace events", async () => {
      for (let i = 0; i < rows.length; i += BATCH) {
        // One text parameter (the client would encode a json one again) for the batch: one round trip.
        await this.#sql`INSERT INTO trace_events (user_id, session_id, run_id, ts, line)
          SELECT user_id, session_id, run_id, ts::timestamptz, line
          FROM ROWS FROM (json_to_recordset(${JSON.stringify(rows.slice(i, i + BATCH))}::text::json)
            AS (user_id text, session_id text, run_id text, ts text, line text))
            WITH ORDINALITY AS r(user_id, session_id, run_id, ts, line, n)
          ORDER BY n`;
      }
    });
  }

  /** Deletes all but about the newest `keep` events (identity ids grow by one, bar a few skipped on rollback). */
  prune(keep: number): Promise<void> {
    return this.#run("prune trace events", async () => {
      await this.#sql`DELETE FROM trace_events WHERE id <= (SELECT max(id) FROM trace_events) - ${keep}`;
    });
  }

  /** One batch of a retention pass, in one statement: a row another replica deleted meanwhile is skipped. */
  pruneOlder(before: string, after: number, limit: number): Promise<TraceBatch> {
    return this.#run("delete expired trace events", async () => {
      const [row] = await this.#sql`WITH batch AS (
          SELECT id, ts FROM trace_events WHERE id > ${after} ORDER BY id LIMIT ${limit}),
        gone AS (DELETE FROM trace_events AS t USING batch
          WHERE t.id = batch.id AND batch.ts < ${before}::timestamptz RETURNING t.id)
        SELECT (SELECT max(id) FROM batch) AS last, (SELECT count(*) FROM gone) AS deleted`;
      return { last: row.last === null ? null : Number(row.last), deleted: Number(row.deleted) };
    });
  }

  /** One page of a session's events, oldest first; the cursor's offset is the next event's row id. */
  page(query: TracePageQuery): Promise<TracePage> {
    const { userId, sessionId, since, runId, limit, cursor } = query;
    if (!(limit >= 1)) throw new RangeError(`limit must be at least 1, got ${limit}`);
    const from = cursor ?? 0;
    return this.#run(`read the trace of session "${sessionId}"`, async () => {
      const rows = await this.#sql`SELECT id, line FROM trace_events
        WHERE user_id = ${userId} AND session_id = ${sessionId} AND ts >= ${since}::timestamptz
          AND (${runId}::text IS NULL OR run_id = ${runId}) AND id >= ${from}
        ORDER BY id LIMIT ${limit + 1}`;
      const next = rows.length > limit ? rows[limit] : null;
      const last = rows.slice(0, limit).at(-1);
      return {
        events: rows.slice(0, limit).map((row) => JSON.parse(row.line as string)),
        nextCursor: next && Number(next.id),
        endCursor: last === undefined ? null : Number(last.id) + 1,
      };
    });
  }

  /** The session's newest event since `since`, or null. */
  latest(query: TraceLatestQuery): Promise<Record<string, unknown> | null> {
    const { userId, sessionId, since } = query;
    return this.#run(`read the trace of session "${sessionId}"`, async () => {
      const rows = await this.#sql`SELECT line FROM trace_events
        WHERE user_id = ${userId} AND session_id = ${sessionId} AND ts >= ${since}::timestamptz
        ORDER BY id DESC LIMIT 1`;
      return rows.length === 0 ? null : JSON.parse(rows[0].line as string);
    });
  }
}
