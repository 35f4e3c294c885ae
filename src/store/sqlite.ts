/**
 * {@linkcode SessionStore} on SQLite (`node:sqlite`): WAL, a busy timeout, and every write transaction opened
 * with `BEGIN IMMEDIATE`, so two processes never deadlock on a lock upgrade.
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import type { StoredMessage } from "../types.ts";
import { type Row, text, toMessage, toPending, toRow, toSession, toTodo } from "./_rows.ts";
import { HISTORY_CACHE_BYTES, HISTORY_CACHE_SESSIONS, HistoryCache } from "./_history_cache.ts";
import { SCHEMA_VERSION } from "./_sqlite_schema.ts";
import { openDatabase } from "./_sqlite_open.ts";
import { promised, type Statements, transaction } from "./_sqlite_sql.ts";
import { acquire, release, renew } from "./_sqlite_leases.ts";
import { SqliteTraceTable } from "./_sqlite_trace.ts";
import {
  type AcquireLeaseOptions,
  type LeaseTake,
  type PendingStep,
  type Session,
  type SessionKey,
  sessionName,
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
  #sql: Statements;
  /** Every process's trace events, in this file. */
  readonly trace: SqliteTraceTable;

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
    const { db, sql } = openDatabase(path, busyTimeoutMs);
    this.#db = db;
    this.#sql = sql;
    this.trace = new SqliteTraceTable(sql);
  }

  /** `work`'s result as a promise: node:sqlite is synchronous, the interface is not. */
  #read<T>(work: () => T): Promise<T> {
    return promised(work);
  }

  /**
   * `work` on the key's ids (checked first) in one transaction; the message rows it reports in `deleted`
   * leave the cached list once committed.
   */
  #write<T>(key: SessionKey, work: (userId: string, sessionId: string, deleted: Row[]) => T): Promise<T> {
    return this.#read(() => {
      const { userId, sessionId } = validateKey(key);
      const deleted: Row[] = [];
      const result = transaction(this.#sql, () => work(userId, sessionId, deleted));
      const rows = deleted.map((row) => ({ rowid: row.rowid as number, id: text(row.id) }));
      this.#history.drop(sessionName({ userId, sessionId }), rows);
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
      const name = sessionName({ userId, sessionId });
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
      this.#history.delete(sessionName({ userId, sessionId }));
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

  acquireLease(
    key: SessionKey,
    owner: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<LeaseTake> {
    return this.#write(
      key,
      (userId, sessionId) => acquire(this.#sql, { userId, sessionId, owner }, ttlMs, this.#now(), options),
    );
  }

  renewLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#write(
      key,
      (userId, sessionId) => renew(this.#sql, userId, sessionId, owner, ttlMs, this.#now()),
    );
  }

  releaseLease(key: SessionKey, owner: string): Promise<boolean> {
    return this.#write(key, (userId, sessionId) => release(this.#sql, userId, sessionId, owner));
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
