/**
 * openSessionStore(): the configured store, opened and proven usable before any input is read: PostgreSQL
 * when AGENT_DATABASE_URL is set, else SQLite at AGENT_DB_PATH (its folder created). A store that cannot be
 * opened is a `ConfigError` naming the variable, in one line, never with a password.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Config } from "../config.ts";
import { ConfigError, errorMessage } from "../errors.ts";
import { PostgresStore } from "./postgres.ts";
import { SqliteStore } from "./sqlite.ts";
import type { SessionStore } from "./store.ts";
import { parseDatabaseUrl, withoutPassword } from "../database_url.ts";
import { SharedTrace, type TraceTable } from "../trace/shared_trace.ts";
import { Retention, type RetentionOptions } from "./retention.ts";

/** The store's `trace_events` table: SQLite's and PostgreSQL's have one; another store, null. */
export function traceTableOf(store: SessionStore): TraceTable | null {
  return store instanceof SqliteStore || store instanceof PostgresStore ? store.trace : null;
}

/**
 * How long a trace event waits for others to ship with into SQLite's table: one transaction takes a turn's
 * events (PostgreSQL's round trip batches what comes meanwhile by itself).
 */
const SQLITE_TRACE_DELAY_MS = 50;

/**
 * Where the tracer's events go on to (`add`) and the trace route reads them: the store's trace table, which
 * every process on the database shares, keeping the newest `maxEvents`; null for a store without one.
 */
export function sharedTraceOf(store: SessionStore, maxEvents?: number): SharedTrace | null {
  const table = traceTableOf(store);
  const delayMs = store instanceof SqliteStore ? SQLITE_TRACE_DELAY_MS : 0;
  return table === null ? null : new SharedTrace(table, { delayMs, maxEvents });
}

/**
 * What deletes the store's expired trace events, idle sessions and old idempotency keys in the background (not started); null for a
 * store that keeps neither in a database.
 */
export function retentionOf(store: SessionStore, options: RetentionOptions = {}): Retention | null {
  if (!(store instanceof SqliteStore || store instanceof PostgresStore)) return null;
  return new Retention({ trace: store.trace, sessions: store, requests: store }, options);
}

/** Opens the store `config` names; rejects with a `ConfigError` saying what failed and what to do. */
export async function openSessionStore(
  config: Pick<Config, "dbPath" | "databaseUrl">,
): Promise<SessionStore> {
  if (config.databaseUrl !== "") return await openPostgres(config.databaseUrl);
  const path = resolve(config.dbPath);
  const advice = "make it and its folder writable, or set AGENT_DB_PATH to another file";
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (error) {
    throw new ConfigError(
      "AGENT_DB_PATH",
      `Cannot create the database folder ${dirname(path)}: ${errorMessage(error)}; ${advice}`,
    );
  }
  try {
    return new SqliteStore(path);
  } catch (error) {
    throw new ConfigError(
      "AGENT_DB_PATH",
      `Cannot open the session database ${path}: ${errorMessage(error)}; ${advice}`,
    );
  }
}

async function openPostgres(databaseUrl: string): Promise<SessionStore> {
  const url = parseDatabaseUrl(databaseUrl);
  try {
    return await PostgresStore.open(databaseUrl);
  } catch (error) {
    const message = withoutPassword(errorMessage(error).split("\n")[0], url);
    throw new ConfigError(
      "AGENT_DATABASE_URL",
      `${message}; start PostgreSQL there or set AGENT_DATABASE_URL to a reachable database`,
    );
  }
}
