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
import { migrate, SCHEMA_VERSION } from "./_store_schema.ts";
import { SessionError } from "./errors.ts";
import type { StoredMessage } from "./types.ts";

export type { Session, Todo };
export { SCHEMA_VERSION };

/**
 * Which session: a session belongs to its user, and ids are per user, so two users' sessions of the same id
 * are two sessions that never see each other.
 */
export interface SessionKey {
  userId: string;
  sessionId: string;
}

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

/** The key's two ids, checked with {@linkcode validateId}. */
function checkKey(key: SessionKey): SessionKey {
  validateId(key.userId, "user id");
  validateId(key.sessionId);
  return key;
}

/** The history cache's key: NUL cannot occur in an id, so two different pairs never meet. */
function toCacheKey(key: SessionKey): string {
  return `${key.userId}\u0000${key.sessionId}`;
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
      migrate(this.#db, (work) => this.#transaction(work));
      this.#requireWritable();
    } catch (error) {
      this.#db.close();
      throw error;
    }
    const db = this.#db;
    this.#statements = {
      getSession: db.prepare("SELECT * FROM sessions WHERE user_id = ? AND id = ?"),
      insertSession: db.prepare(
        "INSERT INTO sessions (user_id, id, summary, turn_count, created_at, updated_at) " +
          "VALUES (?, ?, NULL, 0, ?, ?) ON CONFLICT(user_id, id) DO NOTHING",
      ),
      listSessions: db.prepare("SELECT * FROM sessions WHERE user_id = ? ORDER BY updated_at DESC, id"),
      messages: db.prepare(
        `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND session_id = ? ORDER BY rowid`,
      ),
      insertMessage: db.prepare(
        // ON CONFLICT, not OR IGNORE: only a repeated id is skipped; CHECK and NOT NULL still fail loudly.
        "INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at) " +
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(user_id, session_id, id) DO NOTHING",
      ),
      touchSession: db.prepare(
        "UPDATE sessions SET turn_count = turn_count + ?, updated_at = ? WHERE user_id = ? AND id = ?",
      ),
      insertTodo: db.prepare(
        "INSERT INTO todos (user_id, session_id, text, completed, created_at) VALUES (?, ?, ?, 0, ?) " +
          `RETURNING ${TODO_COLUMNS}`,
      ),
      listTodos: db.prepare(
        `SELECT ${TODO_COLUMNS} FROM todos WHERE user_id = ? AND session_id = ? ORDER BY id`,
      ),
      deleteMessage: db.prepare("DELETE FROM messages WHERE user_id = ? AND session_id = ? AND id = ?"),
      discardMessage: db.prepare(
        "DELETE FROM messages WHERE user_id = ? AND session_id = ? AND id = ? RETURNING role",
      ),
      setSummary: db.prepare(
        "UPDATE sessions SET summary = ?, compacted_turns = compacted_turns + ?, updated_at = ? " +
          "WHERE user_id = ? AND id = ?",
      ),
      deleteSession: db.prepare("DELETE FROM sessions WHERE user_id = ? AND id = ?"),
      ping: db.prepare("SELECT 1 AS ok"),
      dataVersion: db.prepare("PRAGMA data_version"),
      completeTodo: db.prepare(
        "UPDATE todos SET completed = 1, completed_at = COALESCE(completed_at, ?) " +
          `WHERE id = ? AND user_id = ? AND session_id = ? RETURNING ${TODO_COLUMNS}`,
      ),
    };
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
  #cachedHistory(cacheKey: string): readonly StoredMessage[] | undefined {
    const { data_version: version } = this.#statements.dataVersion.get() as { data_version: number };
    if (version !== this.#dataVersion) {
      this.#history.forget();
      this.#dataVersion = version;
      return undefined;
    }
    return this.#history.get(cacheKey);
  }

  #stamp(): string {
    return this.#now().toISOString();
  }

  /** The session, or null if the user has no session of that id. Fails with `SessionError` on a malformed id. */
  get(key: SessionKey): Session | null {
    const { userId, sessionId } = checkKey(key);
    const row = this.#statements.getSession.get(userId, sessionId) as SessionRow | undefined;
    return row === undefined ? null : toSession(row);
  }

  /**
   * The user's session, created if new. Another user's session of the same id is another session: it is
   * neither returned nor touched. Fails only with `SessionError` on a malformed id (or a store failure).
   */
  getOrCreate(key: SessionKey): Session {
    // Read first: an existing session (every turn but the first) costs no write transaction.
    const session = this.get(key);
    if (session !== null) return session;
    const stamp = this.#stamp();
    this.#statements.insertSession.run(key.userId, key.sessionId, stamp, stamp);
    return this.get(key)!;
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
  messages(key: SessionKey): StoredMessage[] {
    const { userId, sessionId } = checkKey(key);
    const cacheKey = toCacheKey(key);
    const cached = this.#cachedHistory(cacheKey);
    if (cached !== undefined) return cached.slice();
    const rows = this.#statements.messages.all(userId, sessionId) as unknown as MessageRow[];
    const messages = rows.map(toMessage);
    this.#history.put(cacheKey, messages);
    return messages.slice();
  }

  /**
   * Appends messages in one transaction and returns how many were new. Idempotent: a message whose id is
   * already stored is skipped, so saving the same state twice adds nothing. Each new `user` message adds one
   * to the session's `turn_count`; runtime, assistant and tool messages do not.
   */
  append(key: SessionKey, messages: readonly StoredMessage[]): number {
    const { userId, sessionId } = checkKey(key);
    // Checked and put in stored form before the transaction: a malformed message changes nothing.
    const rows = messages.map(toStore);
    const added: StoredMessage[] = [];
    this.#transaction(() => {
      let turns = 0;
      for (const { message: m, toolCalls } of rows) {
        const { changes } = this.#statements.insertMessage.run(
          userId,
          sessionId,
          m.id,
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
      if (added.length > 0) this.#statements.touchSession.run(turns, this.#stamp(), userId, sessionId);
    });
    // Committed: the cached list (if any) gets the messages in stored form, exactly what a reload returns.
    if (added.length > 0) this.#history.append(toCacheKey(key), added);
    return added.length;
  }

  /**
   * Applies a compaction in one transaction: stores the new summary and deletes exactly the cut messages
   * (counting `turns` user turns into `compacted_turns`). Either both happen or neither: if any id is not a
   * stored message of the session, it throws and nothing changes.
   */
  applyCompaction(key: SessionKey, summary: string, cutIds: readonly string[], turns: number): void {
    const { userId, sessionId } = checkKey(key);
    this.#transaction(() => {
      for (const id of cutIds) {
        const { changes } = this.#statements.deleteMessage.run(userId, sessionId, id);
        if (changes !== 1) {
          throw new Error(`Cannot compact session "${sessionId}": message "${id}" is not stored`);
        }
      }
      const { changes } = this.#statements.setSummary.run(summary, turns, this.#stamp(), userId, sessionId);
      if (changes !== 1) throw new Error(`Cannot compact session "${sessionId}": no such session`);
    });
    // The ids as stored: SQLite matched a lone surrogate in an id as U+FFFD.
    this.#history.remove(toCacheKey(key), cutIds.map((id) => id.toWellFormed()));
  }

  /**
   * Takes a cancelled turn back in one transaction: deletes those of `ids` that are stored messages of the
   * session, takes their user messages off `turn_count`, and returns how many were deleted. For a turn aborted
   * before its answer was stored, so neither its question nor a half-turn stays behind.
   */
  discardMessages(key: SessionKey, ids: readonly string[]): number {
    const { userId, sessionId } = checkKey(key);
    const gone: string[] = [];
    this.#transaction(() => {
      let turns = 0;
      for (const id of ids) {
        const row = this.#statements.discardMessage.get(userId, sessionId, id) as
          | { role: string }
          | undefined;
        if (row === undefined) continue;
        gone.push(id);
        if (row.role === "user") turns += 1;
      }
      if (turns > 0) this.#statements.touchSession.run(-turns, this.#stamp(), userId, sessionId);
    });
    this.#history.remove(toCacheKey(key), gone.map((id) => id.toWellFormed()));
    return gone.length;
  }

  /**
   * Deletes the user's session with its messages, todos and summary in one transaction; true if it existed.
   * (The trace is append-only and keeps the session's events.)
   */
  deleteSession(key: SessionKey): boolean {
    const { userId, sessionId } = checkKey(key);
    // Messages and todos go by ON DELETE CASCADE, inside the same transaction.
    const deleted = this.#transaction(() =>
      this.#statements.deleteSession.run(userId, sessionId).changes === 1
    );
    this.#history.forget(toCacheKey(key));
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
  addTodo(key: SessionKey, text: string): Todo {
    const { userId, sessionId } = checkKey(key);
    return this.#transaction(() => {
      const row = this.#statements.insertTodo.get(
        userId,
        sessionId,
        text,
        this.#stamp(),
      ) as unknown as TodoRow;
      return toTodo(row);
    });
  }

  /** The session's todos, in the order they were added. */
  listTodos(key: SessionKey): Todo[] {
    const { userId, sessionId } = checkKey(key);
    return (this.#statements.listTodos.all(userId, sessionId) as unknown as TodoRow[]).map(toTodo);
  }

  /** Marks the session's todo done and returns it; null when the session has no todo with that id. */
  completeTodo(key: SessionKey, id: number): Todo | null {
    const { userId, sessionId } = checkKey(key);
    return this.#transaction(() => {
      const row = this.#statements.completeTodo.get(this.#stamp(), id, userId, sessionId) as
        | TodoRow
        | undefined;
      return row === undefined ? null : toTodo(row);
    });
  }

  /** Closes the database. The store is unusable afterwards. */
  close(): void {
    this.#history.forget();
    if (this.#db.isOpen) this.#db.close();
  }
}
