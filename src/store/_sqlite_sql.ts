/**
 * The session store's statements on SQLite: the SQL of each, prepared once, and what it answers
 * ({@linkcode SqliteSql}, the dialect's {@linkcode SessionSql}); the transaction they run in. Private to
 * `sqlite.ts`.
 * @module
 */
// node:sqlite is synchronous: the statements are async only to meet the interface (a throw rejects).
// deno-lint-ignore-file require-await
import type { StatementSync } from "node:sqlite";
import type { StoredMessage, UsageEntry } from "../types.ts";
import type { MessageRow, RequestRow } from "./_rows.ts";
import {
  insertedMessage,
  stateColumn,
  text,
  toKeptResponse,
  toMemoryItem,
  toMessage,
  toPending,
  toRequestRow,
  toSession,
  toTodo,
  toUsage,
} from "./_rows.ts";
import type { HistoryCache, ReadMessage } from "./_history_cache.ts";
import { memoryWords } from "./memory_text.ts";
import type { IdleCursor, SessionSql } from "./sql_store.ts";
import {
  type Calibration,
  type HeldRequest,
  type KeptResponse,
  type MemoryItem,
  type PendingStep,
  type RecalledItem,
  type RequestKey,
  type Session,
  type SessionKey,
  sessionName,
  type StoredResponse,
  type Todo,
} from "./store.ts";

// node:sqlite cuts a TEXT value at its first NUL; read as bytes, free text comes back whole.
const MESSAGE_COLUMNS =
  "rowid, CAST(id AS BLOB) AS id, role, CAST(content AS BLOB) AS content, tool_calls, " +
  "CAST(tool_call_id AS BLOB) AS tool_call_id, CAST(created_at AS BLOB) AS created_at, provider_state";
const TODO_COLUMNS = "id, CAST(text AS BLOB) AS text, completed, created_at, completed_at";
const MEMORY_COLUMNS = "id, CAST(text AS BLOB) AS text, source_session, first_seen, last_seen, last_used, " +
  "use_count";
// The lease is free to take: expired (?5 is now), already the owner's, or held by `from` (?6).
const FREE_LEASE = "(session_leases.expires_at <= ?5 OR session_leases.owner = excluded.owner " +
  "OR session_leases.owner = ?6)";

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
    "created_at, provider_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(user_id, session_id, id) DO NOTHING",
  setCalibration: "UPDATE sessions SET calibration = ? WHERE user_id = ? AND id = ?",
  firstQuestion: "SELECT CAST(content AS BLOB) AS content FROM messages " +
    "WHERE user_id = ? AND session_id = ? AND role = 'user' ORDER BY rowid LIMIT 1",
  nameSession: "UPDATE sessions SET title = ? WHERE user_id = ? AND id = ? AND title IS NULL",
  setTitle: "UPDATE sessions SET title = ? WHERE user_id = ? AND id = ?",
  // A null calibration (?5) keeps the stored one. Whether the session has a title matters only to an append
  // that adds a user turn (it may name the session): that one asks (touchSessionTitled), the others do not.
  touchSession: "UPDATE sessions SET turn_count = turn_count + ?1, updated_at = ?2, " +
    "calibration = coalesce(?5, calibration) WHERE user_id = ?3 AND id = ?4",
  touchSessionTitled: "UPDATE sessions SET turn_count = turn_count + ?1, updated_at = ?2, " +
    "calibration = coalesce(?5, calibration) WHERE user_id = ?3 AND id = ?4 RETURNING title IS NULL AS untitled",
  deleteMessage: "DELETE FROM messages WHERE user_id = ? AND session_id = ? AND id = ? " +
    "RETURNING rowid, CAST(id AS BLOB) AS id, role",
  setSummary: "UPDATE sessions SET summary = ?, compacted_turns = compacted_turns + ?, updated_at = ? " +
    "WHERE user_id = ? AND id = ?",
  // Messages, todos and the pending step go by ON DELETE CASCADE, in the same transaction.
  deleteSession: "DELETE FROM sessions WHERE user_id = ? AND id = ?",
  insertTodo: "INSERT INTO todos (user_id, session_id, text, completed, created_at, call_id) " +
    `VALUES (?, ?, ?, 0, ?, ?) RETURNING ${TODO_COLUMNS}`,
  todoOfCall: `SELECT ${TODO_COLUMNS} FROM todos WHERE user_id = ? AND session_id = ? AND call_id = ?`,
  listTodos: `SELECT ${TODO_COLUMNS} FROM todos WHERE user_id = ? AND session_id = ? ORDER BY id`,
  completeTodo: "UPDATE todos SET completed = 1, completed_at = COALESCE(completed_at, ?) " +
    `WHERE id = ? AND user_id = ? AND session_id = ? RETURNING ${TODO_COLUMNS}`,
  insertPending: "INSERT INTO pending_steps (user_id, session_id, run_id, turn, step, seq, content, " +
    "tool_calls, asked, created_at, provider_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
  getPending: "SELECT run_id, turn, step, seq, CAST(content AS BLOB) AS content, tool_calls, asked, " +
    "created_at, provider_state FROM pending_steps WHERE user_id = ? AND session_id = ?",
  deletePending: "DELETE FROM pending_steps WHERE user_id = ? AND session_id = ? AND run_id = ?",
  // One statement, so atomic: every conflict updates the row (to itself when it is not ours to take, but
  // marked wanted), so RETURNING names its holder. The right-hand sides all read the row as it was.
  takeLease: "INSERT INTO session_leases (user_id, session_id, owner, expires_at) VALUES (?1, ?2, ?3, ?4) " +
    `ON CONFLICT(user_id, session_id) DO UPDATE SET ` +
    `owner = CASE WHEN ${FREE_LEASE} THEN excluded.owner ELSE session_leases.owner END, ` +
    `expires_at = CASE WHEN ${FREE_LEASE} THEN excluded.expires_at ELSE session_leases.expires_at END, ` +
    `wanted = CASE WHEN ${FREE_LEASE} THEN session_leases.wanted AND session_leases.owner = excluded.owner ` +
    "ELSE 1 END RETURNING owner",
  renewLease: "UPDATE session_leases SET expires_at = ? WHERE user_id = ? AND session_id = ? AND owner = ?",
  releaseLease: "DELETE FROM session_leases WHERE user_id = ?1 AND session_id = ?2 " +
    "AND owner IN (?3, ?3 || ?4) RETURNING wanted",
  // ?3 is now, ?4 the mark.
  markLease: "UPDATE session_leases SET owner = CASE WHEN substr(owner, -length(?4)) = ?4 THEN owner " +
    "ELSE owner || ?4 END WHERE user_id = ?1 AND session_id = ?2 AND expires_at > ?3 RETURNING owner",
  insertTrace: "INSERT INTO trace_events (user_id, session_id, run_id, ts, line) VALUES (?, ?, ?, ?, ?)",
  // ISO times in one format (the tracer's and the store's toISOString()) compare as text.
  traceAfter: "SELECT id, line FROM trace_events WHERE user_id = ?1 AND session_id = ?2 AND ts >= ?3 " +
    "AND (?4 IS NULL OR run_id = ?4) AND id >= ?5 ORDER BY id LIMIT ?6",
  traceLatest: "SELECT line FROM trace_events WHERE user_id = ? AND session_id = ? AND ts >= ? " +
    "ORDER BY id DESC LIMIT 1",
  // Row ids grow by one per event, so the newest `keep` are those above the last one minus `keep`.
  pruneTrace: "DELETE FROM trace_events WHERE id <= (SELECT max(id) FROM trace_events) - ?",
  // Sessions last written before ?1, after the cursor (?2, ?3, ?4), whose lease is free at ?5 (ms).
  idleSessions: "SELECT * FROM sessions WHERE updated_at < ?1 AND (updated_at, user_id, id) > (?2, ?3, ?4) " +
    "AND NOT EXISTS (SELECT 1 FROM session_leases AS l WHERE l.user_id = sessions.user_id " +
    "AND l.session_id = sessions.id AND l.expires_at > ?5) ORDER BY updated_at, user_id, id LIMIT ?6",
  deleteSessionTrace: "DELETE FROM trace_events WHERE user_id = ? AND session_id = ?",
  // The last row id of the `limit` events after a row id: the end of a retention batch.
  traceBatchEnd: "SELECT max(id) AS last FROM (SELECT id FROM trace_events WHERE id > ? ORDER BY id LIMIT ?)",
  pruneTraceOlder: "DELETE FROM trace_events WHERE id > ? AND id <= ? AND ts < ?",
  // ?1 user, ?2 day, ?3 model, ?4 prompt, ?5 completion, ?6 calls, ?7 estimated calls, ?8 cached,
  // ?9 written to the cache; ?10 session.
  addUserUsage: "INSERT INTO usage_daily (user_id, day, model, prompt_tokens, completion_tokens, calls, " +
    "estimated_calls, cached_tokens, cache_write_tokens) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) " +
    "ON CONFLICT(user_id, day, model) " +
    "DO UPDATE SET prompt_tokens = prompt_tokens + ?4, completion_tokens = completion_tokens + ?5, " +
    "calls = calls + ?6, estimated_calls = estimated_calls + ?7, cached_tokens = cached_tokens + ?8, " +
    "cache_write_tokens = cache_write_tokens + ?9",
  // Only for a session of this store: a request's private one is not here.
  addSessionUsage: "INSERT INTO session_usage (user_id, session_id, model, last_day, prompt_tokens, " +
    "completion_tokens, calls, estimated_calls, cached_tokens, cache_write_tokens) " +
    "SELECT ?1, ?10, ?3, ?2, ?4, ?5, ?6, ?7, ?8, ?9 " +
    "WHERE EXISTS (SELECT 1 FROM sessions WHERE user_id = ?1 AND id = ?10) " +
    "ON CONFLICT(user_id, session_id, model) DO UPDATE SET last_day = max(last_day, ?2), " +
    "prompt_tokens = prompt_tokens + ?4, completion_tokens = completion_tokens + ?5, calls = calls + ?6, " +
    "estimated_calls = estimated_calls + ?7, cached_tokens = cached_tokens + ?8, " +
    "cache_write_tokens = cache_write_tokens + ?9",
  userUsage:
    "SELECT day, model, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, calls, " +
    "estimated_calls FROM usage_daily WHERE user_id = ? AND day >= ? AND day <= ? ORDER BY day, model",
  sessionUsage: "SELECT last_day AS day, model, prompt_tokens, cached_tokens, cache_write_tokens, " +
    "completion_tokens, calls, estimated_calls FROM session_usage WHERE user_id = ? AND session_id = ? ORDER BY model",
  memoryOfKey: "SELECT id FROM user_memory WHERE user_id = ? AND norm = ?",
  insertMemory: "INSERT INTO user_memory (user_id, text, norm, source_session, first_seen, last_seen, " +
    "last_used) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5) RETURNING id",
  indexMemory: "INSERT INTO user_memory_words (rowid, words) VALUES (?, ?)",
  seeMemory: "UPDATE user_memory SET last_seen = ?, last_used = ? WHERE id = ?",
  // Every item past the `keep` most recently used (?2) of the user (?1).
  trimMemory: "DELETE FROM user_memory WHERE id IN (SELECT id FROM user_memory WHERE user_id = ?1 " +
    "ORDER BY last_used DESC, id DESC LIMIT -1 OFFSET ?2)",
  listMemory: `SELECT ${MEMORY_COLUMNS} FROM user_memory WHERE user_id = ? ORDER BY id`,
  // ?1 the match expression (any of the user's tokens), ?2 the limit: ranked in the index alone (bm25 is
  // lower for better); then only the best are read from the table, one by one (`memoryText`), in one read
  // transaction with it. One statement joining the two took longer, most when nothing matched.
  rankMemory: "SELECT rowid AS id, -bm25(user_memory_words) AS score FROM user_memory_words " +
    "WHERE user_memory_words MATCH ?1 ORDER BY score DESC, rowid LIMIT ?2",
  memoryText: "SELECT CAST(text AS BLOB) AS text FROM user_memory WHERE id = ? AND user_id = ?",
  beginRead: "BEGIN",
  useMemory: "UPDATE user_memory SET use_count = use_count + 1, last_used = ?1 WHERE user_id = ?2 " +
    "AND id IN (SELECT value FROM json_each(?3))",
  // Merges up to 64 pages of the index's segments: FTS5 otherwise leaves one segment per write transaction
  // until its automerge, and a recall reads every segment.
  mergeMemoryIndex: "INSERT INTO user_memory_words (user_memory_words, rank) VALUES ('merge', 64)",
  deleteMemoryItem: "DELETE FROM user_memory WHERE user_id = ? AND id = ?",
  deleteMemory: "DELETE FROM user_memory WHERE user_id = ?",
  insertRequest: "INSERT INTO idempotency_keys (user_id, key, request_hash, state, created_at) " +
    "VALUES (?, ?, ?, 'running', ?) ON CONFLICT(user_id, key) DO NOTHING",
  // No lock to take: every write transaction begins IMMEDIATE, holding the whole database.
  getRequest: "SELECT request_hash, state, status, content_type, CAST(body AS BLOB) AS body, created_at " +
    "FROM idempotency_keys WHERE user_id = ? AND key = ?",
  retakeRequest: "UPDATE idempotency_keys SET request_hash = ?, state = 'running', status = NULL, " +
    "content_type = NULL, body = NULL, created_at = ? WHERE user_id = ? AND key = ?",
  finishRequest: "UPDATE idempotency_keys SET state = 'done', status = ?, content_type = ?, body = ? " +
    "WHERE user_id = ? AND key = ? AND created_at = ? AND state = 'running'",
  deleteRequest: "DELETE FROM idempotency_keys WHERE user_id = ? AND key = ? AND created_at = ?",
  pruneRequests: "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys " +
    "WHERE created_at <= ? LIMIT ?)",
  upsertResponse:
    "INSERT INTO responses (user_id, id, session_id, body, created_at) VALUES (?, ?, ?, ?, ?) " +
    "ON CONFLICT(user_id, id) DO UPDATE SET body = excluded.body",
  getResponse: "SELECT user_id, id, session_id, CAST(body AS BLOB) AS body, created_at FROM responses " +
    "WHERE user_id = ? AND id = ?",
  ping: "SELECT 1 AS ok",
  // Changes when another connection commits.
  dataVersion: "PRAGMA data_version",
};

/** The store's prepared statements: the table's, and the transaction's own. */
export type Statements = Record<keyof typeof SQL | "begin" | "commit" | "rollback", StatementSync>;

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

/**
 * The statements on one connection. Messages are read through the history cache: a turn reads only what is
 * new, and hands on the same message objects, whose request JSON is then built once. What this connection
 * stores goes into the cache as it commits, so while no other connection commits (`PRAGMA data_version`), a
 * kept list is whole and read without a query.
 */
export class SqliteSql implements SessionSql {
  readonly #sql: Statements;
  readonly #history: HistoryCache;
  #dataVersion = -1;
  /** Messages the open transaction deleted: they leave the cached lists once it commits. */
  #deleted = new Map<string, { rowid: number; id: string }[]>();
  /** Messages the open transaction inserted into kept lists (null: one that reads back otherwise). */
  #inserted = new Map<string, ReadMessage[] | null>();

  constructor(sql: Statements, history: HistoryCache) {
    this.#sql = sql;
    this.#history = history;
  }

  /** The open transaction ended: if it committed, what it inserted joins the cache, then what it deleted leaves. */
  ended(committed: boolean): void {
    if (committed) {
      for (const [name, rows] of this.#inserted) {
        if (rows === null) this.#history.delete(name);
        else this.#history.extend(name, rows);
      }
      for (const [name, rows] of this.#deleted) this.#history.drop(name, rows);
    }
    this.#inserted.clear();
    this.#deleted.clear();
  }

  async session({ userId, sessionId }: SessionKey): Promise<Session | null> {
    const row = this.#sql.getSession.get(userId, sessionId);
    return row === undefined ? null : toSession(row);
  }

  async createSession({ userId, sessionId }: SessionKey, stamp: string): Promise<void> {
    this.#sql.insertSession.run(userId, sessionId, stamp, stamp);
  }

  async sessions(userId: string): Promise<Session[]> {
    return this.#sql.listSessions.all(userId).map(toSession);
  }

  async messages(key: SessionKey): Promise<StoredMessage[]> {
    // Another connection committed since the last look: it may have deleted anything.
    const version = this.#sql.dataVersion.get()!.data_version as number;
    const unchanged = version === this.#dataVersion;
    if (!unchanged) this.#history.clear();
    this.#dataVersion = version;
    const name = sessionName(key);
    // Nobody else committed since the last look: a kept list has every row this connection stored.
    if (unchanged && this.#history.has(name)) return this.#history.messages(name, () => []);
    const readAfter = (rowid: number) =>
      this.#sql.messagesAfter.all(key.userId, key.sessionId, rowid).map((row) => ({
        message: toMessage(row),
        rowid: row.rowid as number,
      }));
    return this.#history.messages(name, readAfter);
  }

  async insertMessages(key: SessionKey, rows: readonly MessageRow[]): Promise<string[]> {
    const roles: string[] = [];
    const name = sessionName(key);
    const kept = this.#history.has(name);
    for (const row of rows) {
      const result = this.#sql.insertMessage.run(key.userId, key.sessionId, ...row);
      if (result.changes !== 1) continue;
      roles.push(row[1]);
      if (kept) this.#insertedInto(name, insertedMessage(row), Number(result.lastInsertRowid));
    }
    return roles;
  }

  /** Notes a message inserted into the kept list `name`, to add once the transaction commits. */
  #insertedInto(name: string, message: StoredMessage | null, rowid: number): void {
    const rows = this.#inserted.get(name);
    if (rows === null) return;
    if (message === null) this.#inserted.set(name, null);
    else if (rows === undefined) this.#inserted.set(name, [{ message, rowid }]);
    else rows.push({ message, rowid });
  }

  async setCalibration({ userId, sessionId }: SessionKey, calibration: Calibration): Promise<void> {
    this.#sql.setCalibration.run(JSON.stringify(calibration), userId, sessionId);
  }

  async firstQuestion({ userId, sessionId }: SessionKey): Promise<string | null> {
    const row = this.#sql.firstQuestion.get(userId, sessionId);
    return row === undefined || row.content === null ? null : text(row.content);
  }

  async nameSession({ userId, sessionId }: SessionKey, title: string): Promise<void> {
    this.#sql.nameSession.run(title, userId, sessionId);
  }

  async setTitle({ userId, sessionId }: SessionKey, title: string | null): Promise<boolean> {
    return this.#sql.setTitle.run(title, userId, sessionId).changes === 1;
  }

  async touchSession(
    { userId, sessionId }: SessionKey,
    turns: number,
    stamp: string,
    calibration?: Calibration,
  ): Promise<boolean> {
    const calibrated = calibration === undefined ? null : JSON.stringify(calibration);
    if (turns <= 0) {
      this.#sql.touchSession.run(turns, stamp, userId, sessionId, calibrated);
      return false;
    }
    return this.#sql.touchSessionTitled.get(turns, stamp, userId, sessionId, calibrated)?.untitled === 1;
  }

  async deleteMessage(key: SessionKey, id: string): Promise<string | null> {
    const row = this.#sql.deleteMessage.get(key.userId, key.sessionId, id);
    if (row === undefined) return null;
    const name = sessionName(key);
    const deleted = this.#deleted.get(name) ?? this.#deleted.set(name, []).get(name)!;
    deleted.push({ rowid: row.rowid as number, id: text(row.id) });
    return row.role as string;
  }

  async setSummary(key: SessionKey, summary: string, turns: number, stamp: string): Promise<boolean> {
    return this.#sql.setSummary.run(summary, turns, stamp, key.userId, key.sessionId).changes === 1;
  }

  async deleteSession(key: SessionKey): Promise<boolean> {
    this.#history.delete(sessionName(key));
    return this.#sql.deleteSession.run(key.userId, key.sessionId).changes === 1;
  }

  async insertPending({ userId, sessionId }: SessionKey, step: PendingStep): Promise<void> {
    const { runId, turn, step: index, seq, content, toolCalls, asked, createdAt } = step;
    const [calls, waiting] = [JSON.stringify(toolCalls), JSON.stringify(asked)];
    this.#sql.insertPending.run(
      userId,
      sessionId,
      runId,
      turn,
      index,
      seq,
      content,
      calls,
      waiting,
      createdAt,
      stateColumn(step.providerState),
    );
  }

  async pending({ userId, sessionId }: SessionKey): Promise<PendingStep | null> {
    const row = this.#sql.getPending.get(userId, sessionId);
    return row === undefined ? null : toPending(row);
  }

  async deletePending({ userId, sessionId }: SessionKey, runId: string): Promise<boolean> {
    return this.#sql.deletePending.run(userId, sessionId, runId).changes === 1;
  }

  async insertTodo(
    { userId, sessionId }: SessionKey,
    text: string,
    stamp: string,
    callId: string | null,
  ): Promise<Todo> {
    return toTodo(this.#sql.insertTodo.get(userId, sessionId, text, stamp, callId)!);
  }

  async todoOfCall({ userId, sessionId }: SessionKey, callId: string): Promise<Todo | null> {
    const row = this.#sql.todoOfCall.get(userId, sessionId, callId);
    return row === undefined ? null : toTodo(row);
  }

  async todos({ userId, sessionId }: SessionKey): Promise<Todo[]> {
    return this.#sql.listTodos.all(userId, sessionId).map(toTodo);
  }

  async completeTodo({ userId, sessionId }: SessionKey, id: number, stamp: string): Promise<Todo | null> {
    const row = this.#sql.completeTodo.get(stamp, id, userId, sessionId);
    return row === undefined ? null : toTodo(row);
  }

  async takeLease(key: SessionKey, owner: string, ttlMs: number, from: string | null, now: Date) {
    const at = now.getTime();
    const row = this.#sql.takeLease.get(key.userId, key.sessionId, owner, at + ttlMs, at, from);
    return String(row?.owner);
  }

  async renewLease(key: SessionKey, owner: string, ttlMs: number, now: Date): Promise<boolean> {
    const until = now.getTime() + ttlMs;
    return this.#sql.renewLease.run(until, key.userId, key.sessionId, owner).changes === 1;
  }

  async releaseLease({ userId, sessionId }: SessionKey, owner: string, mark: string): Promise<boolean> {
    return this.#sql.releaseLease.get(userId, sessionId, owner, mark)?.wanted === 1;
  }

  async markLease({ userId, sessionId }: SessionKey, mark: string, now: Date): Promise<boolean> {
    return this.#sql.markLease.get(userId, sessionId, now.getTime(), mark) !== undefined;
  }

  async idleSessions(before: string, after: IdleCursor, limit: number, now: Date): Promise<Session[]> {
    const { updatedAt, userId, id } = after;
    return this.#sql.idleSessions.all(before, updatedAt, userId, id, now.getTime(), limit).map(toSession);
  }

  async deleteSessionTrace({ userId, sessionId }: SessionKey): Promise<void> {
    this.#sql.deleteSessionTrace.run(userId, sessionId);
  }

  async addUsage({ userId, sessionId }: SessionKey, entry: UsageEntry): Promise<void> {
    const { day, model, promptTokens, completionTokens, calls, estimatedCalls, cachedTokens } = entry;
    const counts = [
      promptTokens,
      completionTokens,
      calls,
      estimatedCalls,
      cachedTokens,
      entry.cacheWriteTokens,
    ] as const;
    this.#sql.addUserUsage.run(userId, day, model, ...counts);
    this.#sql.addSessionUsage.run(userId, day, model, ...counts, sessionId);
  }

  async userUsage(userId: string, from: string, to: string): Promise<UsageEntry[]> {
    return this.#sql.userUsage.all(userId, from, to).map(toUsage);
  }

  async sessionUsage({ userId, sessionId }: SessionKey): Promise<UsageEntry[]> {
    return this.#sql.sessionUsage.all(userId, sessionId).map(toUsage);
  }

  async upsertMemory(userId: string, text: string, norm: string, sessionId: string | null, stamp: string) {
    const found = this.#sql.memoryOfKey.get(userId, norm);
    if (found !== undefined) {
      this.#sql.seeMemory.run(stamp, stamp, found.id as number);
      return { id: found.id as number, added: false };
    }
    const id = this.#sql.insertMemory.get(userId, text, norm, sessionId, stamp)!.id as number;
    this.#sql.indexMemory.run(id, memoryTokens(userId, memoryWords(text)).join(" "));
    return { id, added: true };
  }

  async trimMemory(userId: string, keep: number): Promise<number> {
    return Number(this.#sql.trimMemory.run(userId, keep).changes);
  }

  async memory(userId: string): Promise<MemoryItem[]> {
    return this.#sql.listMemory.all(userId).map(toMemoryItem);
  }

  async recallMemory(userId: string, terms: readonly string[], limit: number): Promise<RecalledItem[]> {
    // Tokens are letters and digits only, so quoting each makes it a plain word, never query syntax.
    const match = memoryTokens(userId, terms).map((token) => `"${token}"`).join(" OR ");
    // One snapshot for the ranking and the texts, as one statement would see.
    this.#sql.beginRead.run();
    try {
      const recalled: RecalledItem[] = [];
      for (const row of this.#sql.rankMemory.all(match, limit)) {
        const id = row.id as number;
        // Never another user's: their tokens differ (see memoryTokens).
        const item = this.#sql.memoryText.get(id, userId);
        if (item !== undefined) recalled.push({ id, text: text(item.text), score: row.score as number });
      }
      return recalled;
    } finally {
      this.#sql.commit.run();
    }
  }

  async lockMemory(): Promise<void> {
    // Writers take turns here: every write transaction begins IMMEDIATE, holding the whole database.
  }

  async useMemory(userId: string, ids: readonly number[], stamp: string): Promise<void> {
    this.#sql.useMemory.run(stamp, userId, JSON.stringify(ids));
  }

  async mergeMemoryIndex(): Promise<void> {
    this.#sql.mergeMemoryIndex.run();
  }

  async deleteMemory(userId: string, id: number | null): Promise<number> {
    const result = id === null
      ? this.#sql.deleteMemory.run(userId)
      : this.#sql.deleteMemoryItem.run(userId, id);
    return Number(result.changes);
  }

  async insertRequest({ userId, key }: RequestKey, hash: string, at: number): Promise<boolean> {
    return this.#sql.insertRequest.run(userId, key, hash, at).changes === 1;
  }

  async request({ userId, key }: RequestKey): Promise<RequestRow | null> {
    const row = this.#sql.getRequest.get(userId, key);
    return row === undefined ? null : toRequestRow(row);
  }

  async retakeRequest({ userId, key }: RequestKey, hash: string, at: number): Promise<void> {
    this.#sql.retakeRequest.run(hash, at, userId, key);
  }

  async finishRequest({ userId, key, claimedAt }: HeldRequest, response: StoredResponse): Promise<boolean> {
    const { status, contentType, body } = response;
    return this.#sql.finishRequest.run(status, contentType, body, userId, key, claimedAt).changes === 1;
  }

  async deleteRequest({ userId, key, claimedAt }: HeldRequest): Promise<boolean> {
    return this.#sql.deleteRequest.run(userId, key, claimedAt).changes === 1;
  }

  async pruneRequests(before: number, limit: number): Promise<number> {
    return Number(this.#sql.pruneRequests.run(before, limit).changes);
  }

  async upsertResponse(key: SessionKey, id: string, body: string, stamp: string): Promise<void> {
    this.#sql.upsertResponse.run(key.userId, id, key.sessionId, body, stamp);
  }

  async response(userId: string, id: string): Promise<KeptResponse | null> {
    const row = this.#sql.getResponse.get(userId, id);
    return row === undefined ? null : toKeptResponse(row);
  }
}

const ENCODER = new TextEncoder();

/**
 * `words` as the user's tokens in the full-text index: `u`, the user id's UTF-8 bytes in hex, `z` (never a hex
 * digit, so where the owner ends is plain), the word. One token each for the tokenizer: letters and digits.
 */
function memoryTokens(userId: string, words: readonly string[]): string[] {
  let owner = "u";
  for (const byte of ENCODER.encode(userId)) owner += byte.toString(16).padStart(2, "0");
  return words.map((word) => `${owner}z${word}`);
}
