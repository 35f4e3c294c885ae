/**
 * The session store on SQLite (`node:sqlite`): WAL, a busy timeout, and every write transaction opened
 * with `BEGIN IMMEDIATE`, so two processes never deadlock on a lock upgrade. The rules are the
 * {@linkcode SqlStore}'s; this is the dialect: one connection, its statements prepared once.
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import { HISTORY_CACHE_BYTES, HISTORY_CACHE_SESSIONS, HistoryCache } from "./_history_cache.ts";
import { openDatabase } from "./_sqlite_open.ts";
import { SqliteSql, type Statements } from "./_sqlite_sql.ts";
import { SqliteTraceTable } from "./_sqlite_trace.ts";
import { SCHEMA_VERSION, type SessionKey } from "./store.ts";
import { type SessionSql, type SqlDialect, SqlStore } from "./sql_store.ts";

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

/** The SQLite session store. One instance per process. */
export class SqliteStore extends SqlStore {
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
    const history = new HistoryCache(cacheSessions, cacheBytes);
    const connection = new SqliteConnection(openDatabase(path, busyTimeoutMs), history);
    super(connection, now);
    this.trace = new SqliteTraceTable(connection.statements, (work) => connection.exclusive(work));
  }
}

/**
 * The connection as the store's dialect. Work runs one piece at a time: a write awaits between its
 * statements, and on one connection another's statements would otherwise land inside its transaction.
 */
class SqliteConnection implements SqlDialect {
  readonly statements: Statements;
  readonly #db: DatabaseSync;
  readonly #sql: SqliteSql;
  readonly #history: HistoryCache;
  #tail: Promise<unknown> = Promise.resolve();

  constructor({ db, sql }: { db: DatabaseSync; sql: Statements }, history: HistoryCache) {
    this.#db = db;
    this.statements = sql;
    this.#history = history;
    this.#sql = new SqliteSql(sql, history);
  }

  /** Runs `work` once the work before it has ended; its throw rejects. */
  exclusive<T>(work: () => T | Promise<T>): Promise<T> {
    const run = this.#tail.then(work);
    this.#tail = run.then(() => {}, () => {});
    return run;
  }

  read<T>(_action: string, work: (sql: SessionSql) => Promise<T>): Promise<T> {
    return this.exclusive(() => work(this.#sql));
  }

  write<T>(_action: string, _key: SessionKey | null, work: (sql: SessionSql) => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      const { begin, commit, rollback } = this.statements;
      begin.run();
      try {
        const result = await work(this.#sql);
        commit.run();
        this.#sql.ended(true);
        return result;
      } catch (error) {
        try {
          rollback.run();
        } finally {
          this.#sql.ended(false);
        }
        throw error;
      }
    });
  }

  ping(): Promise<boolean> {
    return this.exclusive(() => this.statements.ping.get()?.ok === 1).catch(() => false);
  }

  close(): Promise<void> {
    return this.exclusive(() => {
      this.#history.clear();
      if (this.#db.isOpen) this.#db.close();
    });
  }
}
