/**
 * Sessions, messages and todos on SQLite (`node:sqlite`): WAL, a busy timeout, and every write transaction
 * opened with `BEGIN IMMEDIATE` so two processes never deadlock on a lock upgrade.
 * @module
 */
import { DatabaseSync, type StatementSync } from "node:sqlite";
import { HistoryCache } from "./_history_cache.ts";
import {
  MESSAGE_COLUMNS,
  type MessageRow,
  OLD_SESSIONS_INDEX,
  REPLACE_OLD_INDEX,
  SCHEMA,
  type Session,
  type SessionRow,
  type Todo,
  TODO_COLUMNS,
  type TodoRow,
  toMessage,
  toSession,
  toStore,
  toTodo,
} from "./_store_rows.ts";
import { SessionError } from "./errors.ts";
import type { StoredMessage } from "./types.ts";

export type { Session, Todo };

/** The schema version this code writes, kept in `PRAGMA user_version`. */
export const SCHEMA_VERSION = 1;

const SESSION_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Fails with `SessionError` unless `id` is 1–128 characters of `[A-Za-z0-9._:-]`. `what` names the value in
 * the message ("session id", "user id").
 */
export function validateId(id: unknown, what = "session id"): string {
  if (typeof id !== "string" || !SESSION_ID.test(id)) {
    const shown = typeof id === "string"
      ? JSON.stringify(id.length > 40 ? id.slice(0, 40) + "…" : id)
      : typeof id;
    throw new SessionError(
      `Invalid ${what} ${shown}: expected 1-128 characters of letters, digits and . _ : -`,
      "invalid_id",
    );
  }
  return id;
}

/** Options of {@linkcode SessionStore}. */
export interface SessionStoreOptions {
  /**
   * The clock for every timestamp the store writes.
   * @default {() => new Date()}
   */
  now?: () => Date;
  /**
   * How long a writer waits for another process's lock, in milliseconds.
   * @default {5000}
   */
  busyTimeoutMs?: number;
  /**
   * How many sessions' message lists are kept in memory, so a turn does not reload its history.
   * @default {256}
   */
  historyCacheSessions?: number;
}

/** The session store. One instance per process; statements are prepared once and reused. */
export class SessionStore {
  #db: DatabaseSync;
  #now: () => Date;
  #statements: Record<string, StatementSync>;
  /** BEGIN IMMEDIATE, COMMIT, ROLLBACK: prepared before the migration, the first transaction. */
  #control!: { begin: StatementSync; commit: StatementSync; rollback: StatementSync };
  #history: HistoryCache;
  /** `PRAGMA data_version` when the cache was last checked: it changes when another connection commits. */
  #dataVersion = -1;

  /** Opens (and if needed creates) the database at `path`; `":memory:"` gives a private in-memory one. */
  constructor(path: string, options: SessionStoreOptions = {}) {
    const {
      now = () => new Date(),
      busyTimeoutMs = 5000,
      historyCacheSessions = 256,
    } = options;
    this.#history = new HistoryCache(historyCacheSessions);
    this.#now = now;
    this.#db = new DatabaseSync(path);
    try {
      this.#db.exec(`PRAGMA busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
      this.#db.exec("PRAGMA journal_mode = WAL");
      // NORMAL in WAL mode survives a process crash (kill -9); only a power loss may drop the last commits.
      this.#db.exec("PRAGMA synchronous = NORMAL");
      this.#db.exec("PRAGMA foreign_keys = ON");
      this.#control = {
        begin: this.#db.prepare("BEGIN IMMEDIATE"),
        commit: this.#db.prepare("COMMIT"),
        rollback: this.#db.prepare("ROLLBACK"),
      };
      this.#migrate();
      this.#requireWritable();
    } catch (error) {
      this.#db.close();
      throw error;
    }
    const db = this.#db;
    this.#statements = {
      getSession: db.prepare("SELECT * FROM sessions WHERE id = ?"),
      insertSession: db.prepare(
        "INSERT INTO sessions (id, user_id, summary, turn_count, created_at, updated_at) " +
          "VALUES (?, ?, NULL, 0, ?, ?) ON CONFLICT(id) DO NOTHING",
      ),
      listSessions: db.prepare("SELECT * FROM sessions WHERE user_id = ? ORDER BY updated_at DESC, id"),
      messages: db.prepare(
        `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY rowid`,
      ),
      insertMessage: db.prepare(
        // ON CONFLICT, not OR IGNORE: only a repeated id is skipped; CHECK and NOT NULL still fail loudly.
        "INSERT INTO messages (id, session_id, role, content, tool_calls, tool_call_id, created_at) " +
          "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, id) DO NOTHING",
      ),
      touchSession: db.prepare(
        "UPDATE sessions SET turn_count = turn_count + ?, updated_at = ? WHERE id = ?",
      ),
      insertTodo: db.prepare(
        `INSERT INTO todos (session_id, text, completed, created_at) VALUES (?, ?, 0, ?) RETURNING ${TODO_COLUMNS}`,
      ),
      listTodos: db.prepare(`SELECT ${TODO_COLUMNS} FROM todos WHERE session_id = ? ORDER BY id`),
      deleteMessage: db.prepare("DELETE FROM messages WHERE id = ? AND session_id = ?"),
      discardMessage: db.prepare("DELETE FROM messages WHERE id = ? AND session_id = ? RETURNING role"),
      setSummary: db.prepare(
        "UPDATE sessions SET summary = ?, compacted_turns = compacted_turns + ?, updated_at = ? WHERE id = ?",
      ),
      deleteSession: db.prepare("DELETE FROM sessions WHERE id = ?"),
      ping: db.prepare("SELECT 1 AS ok"),
      dataVersion: db.prepare("PRAGMA data_version"),
      completeTodo: db.prepare(
        "UPDATE todos SET completed = 1, completed_at = COALESCE(completed_at, ?) " +
          `WHERE id = ? AND session_id = ? RETURNING ${TODO_COLUMNS}`,
      ),
    };
  }

  #migrate(): void {
    const { user_version: version } = this.#db.prepare("PRAGMA user_version").get() as {
      user_version: number;
    };
    if (version > SCHEMA_VERSION) {
      throw new Error(
        `Cannot open the session database: its schema version is ${version}, this program knows ${SCHEMA_VERSION}`,
      );
    }
    if (version === SCHEMA_VERSION) {
      const old = this.#db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?");
      if (old.get(OLD_SESSIONS_INDEX) !== undefined) {
        this.#transaction(() => this.#db.exec(REPLACE_OLD_INDEX));
      }
      return;
    }
    this.#transaction(() => {
      this.#db.exec(SCHEMA);
      this.#db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
    });
  }

  /**
   * Fails now, at open, when the database cannot be written (a read-only file, a read-only folder for its
   * journal), rather than in the middle of the first turn: a write that is rolled back.
   */
  #requireWritable(): void {
    const { begin, rollback } = this.#control;
    begin.run();
    try {
      this.#db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
    } finally {
      rollback.run();
    }
  }

  /** Runs `work` inside `BEGIN IMMEDIATE … COMMIT`; rolls back and rethrows if it throws. */
  #transaction<T>(work: () => T): T {
    const { begin, commit, rollback } = this.#control;
    begin.run();
    try {
      const result = work();
      commit.run();
      return result;
    } catch (error) {
      rollback.run();
      throw error;
    }
  }

  /**
   * The cached message list of the session, or undefined. Drops the whole cache first if another
   * connection (another process, another store) committed since the last look: its writes are not in it.
   */
  #cachedHistory(sessionId: string): readonly StoredMessage[] | undefined {
    const { data_version: version } = this.#statements.dataVersion.get() as { data_version: number };
    if (version !== this.#dataVersion) {
      this.#history.forget();
      this.#dataVersion = version;
      return undefined;
    }
    return this.#history.get(sessionId);
  }

  #stamp(): string {
    return this.#now().toISOString();
  }

  /** The session, or null if it does not exist. Fails with `SessionError` on a malformed id. */
  get(sessionId: string): Session | null {
    validateId(sessionId);
    const row = this.#statements.getSession.get(sessionId) as SessionRow | undefined;
    return row === undefined ? null : toSession(row);
  }

  /**
   * The session, created for `userId` if new. Fails with `SessionError` (`not_found`) when it belongs to
   * another user, so callers can answer as if it did not exist.
   */
  getOrCreate(sessionId: string, userId: string): Session {
    validateId(sessionId);
    validateId(userId, "user id");
    // Read first: an existing session (every turn but the first) costs no write transaction.
    let session = this.get(sessionId);
    if (session === null) {
      const stamp = this.#stamp();
      this.#statements.insertSession.run(sessionId, userId, stamp, stamp);
      session = this.get(sessionId)!;
    }
    if (session.userId !== userId) {
      throw new SessionError(`Session "${sessionId}" not found`, "not_found");
    }
    return session;
  }

  /** The user's sessions, most recently updated first. */
  listSessions(userId: string): Session[] {
    validateId(userId, "user id");
    return (this.#statements.listSessions.all(userId) as unknown as SessionRow[]).map(toSession);
  }

  /**
   * Every stored message of the session, oldest first: a new array each call, of frozen messages. Served
   * from memory while this store is the only writer, so a turn does not reload its history.
   */
  messages(sessionId: string): StoredMessage[] {
    const cached = this.#cachedHistory(sessionId);
    if (cached !== undefined) return cached.slice();
    const rows = this.#statements.messages.all(sessionId) as unknown as MessageRow[];
    const messages = rows.map(toMessage);
    this.#history.put(sessionId, messages);
    return messages.slice();
  }

  /**
   * Appends messages in one transaction and returns how many were new. Idempotent: a message whose id is
   * already stored is skipped, so saving the same state twice adds nothing. Each new `user` message adds one
   * to the session's `turn_count`; runtime, assistant and tool messages do not.
   */
  append(sessionId: string, messages: readonly StoredMessage[]): number {
    // Checked and put in stored form before the transaction: a malformed message changes nothing.
    const rows = messages.map(toStore);
    const added: StoredMessage[] = [];
    this.#transaction(() => {
      let turns = 0;
      for (const { message: m, toolCalls } of rows) {
        const { changes } = this.#statements.insertMessage.run(
          m.id,
          sessionId,
          m.role,
          m.content,
          toolCalls,
          m.toolCallId ?? null,
          m.createdAt,
        );
        if (changes === 0) continue;
        added.push(m);
        if (m.role === "user") turns += 1;
      }
      if (added.length > 0) this.#statements.touchSession.run(turns, this.#stamp(), sessionId);
    });
    // Committed: the cached list (if any) gets the messages in stored form, exactly what a reload returns.
    if (added.length > 0) this.#history.append(sessionId, added);
    return added.length;
  }

  /**
   * Applies a compaction in one transaction: stores the new summary and deletes exactly the cut messages
   * (counting `turns` user turns into `compacted_turns`). Either both happen or neither: if any id is not a
   * stored message of the session, it throws and nothing changes.
   */
  applyCompaction(sessionId: string, summary: string, cutIds: readonly string[], turns: number): void {
    this.#transaction(() => {
      for (const id of cutIds) {
        const { changes } = this.#statements.deleteMessage.run(id, sessionId);
        if (changes !== 1) {
          throw new Error(`Cannot compact session "${sessionId}": message "${id}" is not stored`);
        }
      }
      const { changes } = this.#statements.setSummary.run(summary, turns, this.#stamp(), sessionId);
      if (changes !== 1) throw new Error(`Cannot compact session "${sessionId}": no such session`);
    });
    // The ids as stored: SQLite matched a lone surrogate in an id as U+FFFD.
    this.#history.remove(sessionId, cutIds.map((id) => id.toWellFormed()));
  }

  /**
   * Takes a cancelled turn back in one transaction: deletes those of `ids` that are stored messages of the
   * session, takes their user messages off `turn_count`, and returns how many were deleted. For a turn aborted
   * before its answer was stored, so neither its question nor a half-turn stays behind.
   */
  discardMessages(sessionId: string, ids: readonly string[]): number {
    const gone: string[] = [];
    this.#transaction(() => {
      let turns = 0;
      for (const id of ids) {
        const row = this.#statements.discardMessage.get(id, sessionId) as { role: string } | undefined;
        if (row === undefined) continue;
        gone.push(id);
        if (row.role === "user") turns += 1;
      }
      if (turns > 0) this.#statements.touchSession.run(-turns, this.#stamp(), sessionId);
    });
    this.#history.remove(sessionId, gone.map((id) => id.toWellFormed()));
    return gone.length;
  }

  /**
   * Deletes the session with its messages, todos and summary in one transaction; true if it existed. (The
   * trace is append-only and keeps the session's events.)
   */
  deleteSession(sessionId: string): boolean {
    validateId(sessionId);
    // Messages and todos go by ON DELETE CASCADE, inside the same transaction.
    const deleted = this.#transaction(() => this.#statements.deleteSession.run(sessionId).changes === 1);
    this.#history.forget(sessionId);
    return deleted;
  }

  /** True when the database answers a trivial query; never throws. */
  ping(): boolean {
    try {
      return (this.#statements.ping.get() as { ok: number } | undefined)?.ok === 1;
    } catch {
      return false;
    }
  }

  /** Adds an open todo to the session. */
  addTodo(sessionId: string, text: string): Todo {
    return this.#transaction(() => {
      const row = this.#statements.insertTodo.get(sessionId, text, this.#stamp()) as unknown as TodoRow;
      return toTodo(row);
    });
  }

  /** The session's todos, in the order they were added. */
  listTodos(sessionId: string): Todo[] {
    return (this.#statements.listTodos.all(sessionId) as unknown as TodoRow[]).map(toTodo);
  }

  /** Marks the session's todo done and returns it; null when the session has no todo with that id. */
  completeTodo(sessionId: string, id: number): Todo | null {
    return this.#transaction(() => {
      const row = this.#statements.completeTodo.get(this.#stamp(), id, sessionId) as TodoRow | undefined;
      return row === undefined ? null : toTodo(row);
    });
  }

  /** Closes the database. The store is unusable afterwards. */
  close(): void {
    this.#history.forget();
    if (this.#db.isOpen) this.#db.close();
  }
}
