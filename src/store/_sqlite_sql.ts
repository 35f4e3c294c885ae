/**
 * The SQL of every statement the SQLite store prepares, by name: the columns read as bytes, the conflicts
 * skipped, the lease taken in one statement; and the transaction they run in. Private to `sqlite.ts`.
 * @module
 */
import type { StatementSync } from "node:sqlite";

// node:sqlite cuts a TEXT value at its first NUL; read as bytes, free text comes back whole.
const MESSAGE_COLUMNS =
  "rowid, CAST(id AS BLOB) AS id, role, CAST(content AS BLOB) AS content, tool_calls, " +
  "CAST(tool_call_id AS BLOB) AS tool_call_id, CAST(created_at AS BLOB) AS created_at";
const TODO_COLUMNS = "id, CAST(text AS BLOB) AS text, completed, created_at, completed_at";

/** Each statement the store prepares once it has migrated the database. */
export const SQL = {
  getSession: "SELECT * FROM sessions WHERE user_id = ? AND id = ?",
  insertSession: "INSERT INTO sessions (user_id, id, summary, turn_count, created_at, updated_at) " +
    "VALUES (?, ?, NULL, 0, ?, ?) ON CONFLICT(user_id, id) DO NOTHING",
  listSessions: "SELECT * FROM sessions WHERE user_id = ? ORDER BY updated_at DESC, id",
  messagesAfter:
    `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND session_id = ? AND rowid > ? ` +
    "ORDER BY rowid",
  // ON CONFLICT, not OR IGNORE: only a repeated id is skipped; CHECK and NOT NULL still fail loudly.
  insertMessage: "INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, " +
    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(user_id, session_id, id) DO NOTHING",
  touchSession:
    "UPDATE sessions SET turn_count = turn_count + ?, updated_at = ? WHERE user_id = ? AND id = ?",
  deleteMessage: "DELETE FROM messages WHERE user_id = ? AND session_id = ? AND id = ? " +
    "RETURNING rowid, CAST(id AS BLOB) AS id, role",
  setSummary: "UPDATE sessions SET summary = ?, compacted_turns = compacted_turns + ?, updated_at = ? " +
    "WHERE user_id = ? AND id = ?",
  // Messages and todos go by ON DELETE CASCADE, in the same transaction.
  deleteSession: "DELETE FROM sessions WHERE user_id = ? AND id = ?",
  insertTodo: "INSERT INTO todos (user_id, session_id, text, completed, created_at) VALUES (?, ?, ?, 0, ?) " +
    `RETURNING ${TODO_COLUMNS}`,
  listTodos: `SELECT ${TODO_COLUMNS} FROM todos WHERE user_id = ? AND session_id = ? ORDER BY id`,
  completeTodo: "UPDATE todos SET completed = 1, completed_at = COALESCE(completed_at, ?) " +
    `WHERE id = ? AND user_id = ? AND session_id = ? RETURNING ${TODO_COLUMNS}`,
  insertPending: "INSERT INTO pending_steps (user_id, session_id, run_id, turn, step, seq, content, " +
    "tool_calls, asked, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
  getPending: "SELECT run_id, turn, step, seq, CAST(content AS BLOB) AS content, tool_calls, asked, " +
    "created_at FROM pending_steps WHERE user_id = ? AND session_id = ?",
  deletePending: "DELETE FROM pending_steps WHERE user_id = ? AND session_id = ? AND run_id = ?",
  // Taken when free, expired or already the owner's: one statement, inside BEGIN IMMEDIATE.
  takeLease: "INSERT INTO session_leases (user_id, session_id, owner, expires_at) VALUES (?, ?, ?, ?) " +
    "ON CONFLICT(user_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, " +
    "wanted = CASE WHEN session_leases.owner = excluded.owner THEN session_leases.wanted ELSE 0 END " +
    "WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= ? OR session_leases.owner = ?",
  renewLease: "UPDATE session_leases SET expires_at = ? WHERE user_id = ? AND session_id = ? AND owner = ?",
  releaseLease:
    "DELETE FROM session_leases WHERE user_id = ? AND session_id = ? AND owner = ? RETURNING wanted",
  wantLease:
    "UPDATE session_leases SET wanted = 1 WHERE user_id = ? AND session_id = ? AND owner <> ? RETURNING owner",
  insertTrace: "INSERT INTO trace_events (user_id, session_id, run_id, ts, line) VALUES (?, ?, ?, ?, ?)",
  // ISO times in one format (the tracer's and the store's toISOString()) compare as text.
  traceAfter: "SELECT id, line FROM trace_events WHERE user_id = ?1 AND session_id = ?2 AND ts >= ?3 " +
    "AND (?4 IS NULL OR run_id = ?4) AND id >= ?5 ORDER BY id LIMIT ?6",
  // Row ids grow by one per event, so the newest `keep` are those above the last one minus `keep`.
  pruneTrace: "DELETE FROM trace_events WHERE id <= (SELECT max(id) FROM trace_events) - ?",
  ping: "SELECT 1 AS ok",
  // Changes when another connection commits.
  dataVersion: "PRAGMA data_version",
};

/** The store's prepared statements: the table's, and the transaction's own. */
export type Statements = Record<keyof typeof SQL | "begin" | "commit" | "rollback", StatementSync>;

/** `work`'s result as a promise, its throw as a rejection: node:sqlite is synchronous, the store interface is not. */
export function promised<T>(work: () => T): Promise<T> {
  try {
    return Promise.resolve(work());
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Runs `work` inside `BEGIN IMMEDIATE … COMMIT`; rolls back and rethrows if it throws. */
export function transaction<T>(sql: Pick<Statements, "begin" | "commit" | "rollback">, work: () => T): T {
  sql.begin.run();
  try {
    const result = work();
    sql.commit.run();
    return result;
  } catch (error) {
    sql.rollback.run();
    throw error;
  }
}
