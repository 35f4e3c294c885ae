/**
 * {@linkcode SessionStore} on SQLite (`node:sqlite`): WAL, a busy timeout, and every write transaction opened
 * with `BEGIN IMMEDIATE`, so two processes never deadlock on a lock upgrade.
 * @module
 */
import { DatabaseSync, type StatementSync } from "node:sqlite";
import type { StoredMessage } from "../types.ts";
import { type Row, text, toMessage, toPending, toRow, toSession, toTodo } from "./_rows.ts";
import { HISTORY_CACHE_BYTES, HISTORY_CACHE_SESSIONS, HistoryCache } from "./_history_cache.ts";
import { migrate, SCHEMA_VERSION } from "./_sqlite_schema.ts";
import {
  type PendingStep,
  type Session,
  type SessionKey,
  type SessionStore,
  type Todo,
  validateId,
  validateKey,
} from "./store.ts";

export { HISTORY_CACHE_BYTES, HISTORY_CACHE_SESSIONS, SCHEMA_VERSION };

/** Options of {@linkcode SqliteStore}. */
export interface SqliteStoreOptions {
  /** The clock for every timestamp the store writes. @default {() => new Date()} */
  now?: () => Date;
  /** How long a writer waits for another process's lock, in milliseconds. @default {5000} */
  busyTimeoutMs?: number;
  /** Sessions whose messages are kept in memory, least recently used leaving first. @default {256} */
  cacheSessions?: number;
  /** About how many bytes those messages may take in memory. @default {8 * 1024 * 1024} */
  cacheBytes?: number;
}

// node:sqlite cuts a TEXT value at its first NUL; read as bytes, free text comes back whole.
const MESSAGE_COLUMNS =
  "rowid, CAST(id AS BLOB) AS id, role, CAST(content AS BLOB) AS content, tool_calls, " +
  "CAST(tool_call_id AS BLOB) AS tool_call_id, CAST(created_at AS BLOB) AS created_at";
const TODO_COLUMNS = "id, CAST(text AS BLOB) AS text, completed, created_at, completed_at";

const SQL = {
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
    "WHERE session_leases.owner = excluded.owner OR session_leases.expires_at <= ?",
  renewLease: "UPDATE session_leases SET expires_at = ? WHERE user_id = ? AND session_id = ? AND owner = ?",
  releaseLease:
    "DELETE FROM session_leases WHERE user_id = ? AND session_id = ? AND owner = ? RETURNING wanted",
  wantLease: "UPDATE session_leases SET wanted = 1 WHERE user_id = ? AND session_id = ? AND owner <> ?",
  ping: "SELECT 1 AS ok",
  // Changes when another connection commits.
  dataVersion: "PRAGMA data_version",
};

/** The SQLite session store. One instance per process; statements are prepared once. */
export class SqliteStore implements SessionStore {
  #db: DatabaseSync;
  #now: () => Date;
  /**
   * Recent sessions' messages as read, with the last rowid read: a turn reads only what is new and hands on
   * the same message objects, whose request JSON is then built once (without it a turn cost 12–36% more).
   */
  #history: HistoryCache;
  #dataVersion = -1;
  #sql = {} as Record<keyof typeof SQL | "begin" | "commit" | "rollback", StatementSync>;

  /**
   * Opens (creating or migrating if needed) the database at `path`; `":memory:"` gives a private one.
   * Throws now, not in the first turn, when the database cannot be written; a `RangeError` for a cache bound
   * that is not a non-negative integer.
   */
  constructor(path: string, options: SqliteStoreOptions = {}) {
    const { now = () => new Date(), busyTimeoutMs = 5000 } = options;
    const { cacheSessions = HISTORY_CACHE_SESSIONS, cacheBytes = HISTORY_CACHE_BYTES } = options;
    this.#history = new HistoryCache(cacheSessions, cacheBytes);
    this.#now = now;
    const db = this.#db = new DatabaseSync(path);
    try {
      db.exec(`PRAGMA busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
      db.exec("PRAGMA journal_mode = WAL");
      // NORMAL in WAL mode survives a process crash (kill -9); only a power loss may drop the last commits.
      db.exec("PRAGMA synchronous = NORMAL");
      db.exec("PRAGMA foreign_keys = ON");
      this.#sql.begin = db.prepare("BEGIN IMMEDIATE");
      this.#sql.commit = db.prepare("COMMIT");
      this.#sql.rollback = db.prepare("ROLLBACK");
      migrate(db, (work) => this.#transaction(work));
      // The writable probe: a write, rolled back. A read-only file or folder fails here.
      this.#sql.begin.run();
      try {
        db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
      } finally {
        this.#sql.rollback.run();
      }
      for (const [name, sql] of Object.entries(SQL)) this.#sql[name as keyof typeof SQL] = db.prepare(sql);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** Runs `work` inside `BEGIN IMMEDIATE … COMMIT`; rolls back and rethrows if it throws. */
  #transaction<T>(work: () => T): T {
    this.#sql.begin.run();
    try {
      const result = work();
      this.#sql.commit.run();
      return result;
    } catch (error) {
      this.#sql.rollback.run();
      throw error;
    }
  }

  /** `work`'s result as a promise: node:sqlite is synchronous, the interface is not. */
  #read<T>(work: () => T): Promise<T> {
    try {
      return Promise.resolve(work());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * `work` on the key's ids (checked first) in one transaction; the message rows it reports in `deleted`
   * leave the cached list once committed.
   */
  #write<T>(key: SessionKey, work: (userId: string, sessionId: string, deleted: Row[]) => T): Promise<T> {
    return this.#read(() => {
      const { userId, sessionId } = validateKey(key);
      const deleted: Row[] = [];
      const result = this.#transaction(() => work(userId, sessionId, deleted));
      const rows = deleted.map((row) => ({ rowid: row.rowid as number, id: text(row.id) }));
      this.#history.drop(`${userId}\u0000${sessionId}`, rows);
      return result;
    });
  }

  #session(key: SessionKey): Session | null {
    const { userId, sessionId } = validateKey(key);
    const row = this.#sql.getSession.get(userId, sessionId);
    return row === undefined ? null : toSession(row);
  }

  get(key: SessionKey): Promise<Session | null> {
    return this.#read(() => this.#session(key));
  }

  getOrCreate(key: SessionKey): Promise<Session> {
    return this.#read(() => {
      // Read first: an existing session (every turn but the first) costs no write.
      const session = this.#session(key);
      if (session !== null) return session;
      const stamp = this.#now().toISOString();
      this.#sql.insertSession.run(key.userId, key.sessionId, stamp, stamp);
      return this.#session(key)!;
    });
  }

  listSessions(userId: string): Promise<Session[]> {
    return this.#read(() => this.#sql.listSessions.all(validateId(userId, "user id")).map(toSession));
  }

  messages(key: SessionKey): Promise<StoredMessage[]> {
    return this.#read(() => {
      const { userId, sessionId } = validateKey(key);
      // Another connection committed since the last look: it may have deleted anything.
      const version = this.#sql.dataVersion.get()!.data_version as number;
      if (version !== this.#dataVersion) this.#history.clear();
      this.#dataVersion = version;
      const name = `${userId}\u0000${sessionId}`; // NUL cannot occur in an id
      const readAfter = (rowid: number) =>
        this.#sql.messagesAfter.all(userId, sessionId, rowid).map((row) => ({
          message: toMessage(row),
          rowid: row.rowid as number,
        }));
      return this.#history.messages(name, readAfter);
    });
  }

  append(key: SessionKey, messages: readonly StoredMessage[]): Promise<number> {
    return this.#write(key, (userId, sessionId) => this.#insert(userId, sessionId, messages));
  }

  /** Inserts the new ones of `messages` inside the caller's transaction; returns how many were new. */
  #insert(userId: string, sessionId: string, messages: readonly StoredMessage[]): number {
    // All checked before the first insert: a malformed message changes nothing.
    const rows = messages.map(toRow);
    let added = 0;
    let turns = 0;
    for (const row of rows) {
      if (this.#sql.insertMessage.run(userId, sessionId, ...row).changes === 0) continue;
      added += 1;
      if (row[1] === "user") turns += 1;
    }
    if (added > 0) this.#sql.touchSession.run(turns, this.#now().toISOString(), userId, sessionId);
    return added;
  }

  savePending(key: SessionKey, step: PendingStep): Promise<void> {
    return this.#write(key, (userId, sessionId) => {
      const { runId, turn, step: index, seq, content, toolCalls, asked, createdAt } = step;
      this.#sql.insertPending.run(
        userId,
        sessionId,
        runId,
        turn,
        index,
        seq,
        content,
        JSON.stringify(toolCalls),
        JSON.stringify(asked),
        createdAt,
      );
    });
  }

  pendingStep(key: SessionKey): Promise<PendingStep | null> {
    return this.#read(() => {
      const { userId, sessionId } = validateKey(key);
      const row = this.#sql.getPending.get(userId, sessionId);
      return row === undefined ? null : toPending(row);
    });
  }

  resolvePending(key: SessionKey, runId: string, messages: readonly StoredMessage[]): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => {
      if (this.#sql.deletePending.run(userId, sessionId, runId).changes === 0) return false;
      this.#insert(userId, sessionId, messages);
      return true;
    });
  }

  applyCompaction(
    key: SessionKey,
    summary: string,
    cutIds: readonly string[],
    turns: number,
    options: { previous?: string | null } = {},
  ): Promise<void> {
    return this.#write(key, (userId, sessionId, deleted) => {
      const stored = this.#sql.getSession.get(userId, sessionId);
      if (stored === undefined) throw new Error(`Cannot compact session "${sessionId}": no such session`);
      if (options.previous !== undefined && stored.summary !== options.previous) {
        throw new Error(`Cannot compact session "${sessionId}": its summary changed meanwhile`);
      }
      for (const id of cutIds) {
        const row = this.#sql.deleteMessage.get(userId, sessionId, id);
        if (row === undefined) {
          throw new Error(`Cannot compact session "${sessionId}": message "${id}" is not stored`);
        }
        deleted.push(row);
      }
      const { changes } = this.#sql.setSummary.run(
        summary,
        turns,
        this.#now().toISOString(),
        userId,
        sessionId,
      );
      if (changes !== 1) throw new Error(`Cannot compact session "${sessionId}": no such session`);
    });
  }

  discardMessages(key: SessionKey, ids: readonly string[]): Promise<number> {
    return this.#write(key, (userId, sessionId, deleted) => {
      let turns = 0;
      for (const id of ids) {
        const row = this.#sql.deleteMessage.get(userId, sessionId, id);
        if (row === undefined) continue;
        deleted.push(row);
        if (row.role === "user") turns += 1;
      }
      if (turns > 0) this.#sql.touchSession.run(-turns, this.#now().toISOString(), userId, sessionId);
      return deleted.length;
    });
  }

  deleteSession(key: SessionKey): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => {
      this.#history.delete(`${userId}\u0000${sessionId}`);
      return this.#sql.deleteSession.run(userId, sessionId).changes === 1;
    });
  }

  addTodo(key: SessionKey, text: string): Promise<Todo> {
    return this.#write(key, (userId, sessionId) => {
      return toTodo(this.#sql.insertTodo.get(userId, sessionId, text, this.#now().toISOString())!);
    });
  }

  listTodos(key: SessionKey): Promise<Todo[]> {
    return this.#read(() => {
      const { userId, sessionId } = validateKey(key);
      return this.#sql.listTodos.all(userId, sessionId).map(toTodo);
    });
  }

  completeTodo(key: SessionKey, id: number): Promise<Todo | null> {
    return this.#write(key, (userId, sessionId) => {
      const row = this.#sql.completeTodo.get(this.#now().toISOString(), id, userId, sessionId);
      return row === undefined ? null : toTodo(row);
    });
  }

  acquireLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => {
      const now = this.#now().getTime();
      const until = now + leaseTtl(owner, ttlMs, "acquire");
      if (this.#sql.takeLease.run(userId, sessionId, owner, until, now).changes === 1) return true;
      this.#sql.wantLease.run(userId, sessionId, owner);
      return false;
    });
  }

  renewLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => {
      const until = this.#now().getTime() + leaseTtl(owner, ttlMs, "renew");
      return this.#sql.renewLease.run(until, userId, sessionId, owner).changes === 1;
    });
  }

  releaseLease(key: SessionKey, owner: string): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => {
      return this.#sql.releaseLease.get(userId, sessionId, owner)?.wanted === 1;
    });
  }

  ping(): Promise<boolean> {
    return this.#read(() => this.#sql.ping.get()?.ok === 1).catch(() => false);
  }

  close(): Promise<void> {
    return this.#read(() => {
      this.#history.clear();
      if (this.#db.isOpen) this.#db.close();
    });
  }
}

/** `ttlMs` rounded up to whole milliseconds, once checked with the owner: a non-empty owner, a finite ttl > 0. */
function leaseTtl(owner: unknown, ttlMs: number, action: string): number {
  if (typeof owner !== "string" || owner === "") {
    throw new TypeError(`Cannot ${action} a session lease: the owner must be a non-empty string`);
  }
  if (!(ttlMs > 0) || !Number.isFinite(ttlMs)) {
    throw new RangeError(`Cannot ${action} a session lease: ttlMs must be a finite number > 0, got ${ttlMs}`);
  }
  return Math.ceil(ttlMs);
}
