/**
 * Opening the SQLite file for the store: the connection's settings (busy timeout, WAL, foreign keys), the
 * migration, the writable probe and the statements, prepared once. Private to `sqlite.ts`.
 * @module
 */
import { DatabaseSync } from "node:sqlite";
import { retrySync } from "../retry.ts";
import { migrate } from "./_sqlite_schema.ts";
import { SCHEMA_VERSION } from "./store.ts";
import { SQL, type Statements, transaction } from "./_sqlite_sql.ts";

/**
 * Opens (creating or migrating if needed) the database at `path` with every statement prepared. Throws when
 * it cannot be opened, migrated or written, after closing it. Processes opening one new file at once can
 * meet "database is locked" even with a busy timeout (switching to WAL, the first migration); that is tried
 * again after a short pause (5 ms doubling to 100 ms, ±50%) while the busy timeout allows it.
 */
export function openDatabase(path: string, busyTimeoutMs: number): { db: DatabaseSync; sql: Statements } {
  // Blocking waits: the store opens in its constructor, before anything else runs.
  return retrySync(() => openOnce(path, busyTimeoutMs), {
    maxAttempts: Infinity,
    maxElapsed: busyTimeoutMs,
    minTimeout: 5,
    multiplier: 2,
    maxTimeout: 100,
    jitter: 0.5,
    // SQLite's "database is locked", which some lock changes return without waiting.
    isRetriable: (error) => error instanceof Error && /database is locked/i.test(error.message),
  });
}

function openOnce(path: string, busyTimeoutMs: number): { db: DatabaseSync; sql: Statements } {
  const sql = {} as Statements;
  const db = new DatabaseSync(path);
  try {
    db.exec(`PRAGMA busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
    db.exec("PRAGMA journal_mode = WAL");
    // NORMAL in WAL mode survives a process crash (kill -9); only a power loss may drop the last commits.
    db.exec("PRAGMA synchronous = NORMAL");
    db.exec("PRAGMA foreign_keys = ON");
    sql.begin = db.prepare("BEGIN IMMEDIATE");
    sql.commit = db.prepare("COMMIT");
    sql.rollback = db.prepare("ROLLBACK");
    migrate(db, (work) => transaction(sql, work));
    // The writable probe: a write, rolled back. A read-only file or folder fails here.
    sql.begin.run();
    try {
      db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
    } finally {
      sql.rollback.run();
    }
    for (const [name, text] of Object.entries(SQL)) sql[name as keyof typeof SQL] = db.prepare(text);
  } catch (error) {
    db.close();
    throw error;
  }
  return { db, sql };
}
