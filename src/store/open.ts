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
import { parseDatabaseUrl, withoutPassword } from "./database_url.ts";
import { SharedTrace } from "../trace/shared_trace.ts";

/**
 * Where the store keeps every replica's trace events, as the trace route reads them and the tracer feeds
 * them (`add`); null for SQLite, whose trace file is the one a single host has.
 */
export function sharedTraceOf(store: SessionStore): SharedTrace | null {
  return store instanceof PostgresStore ? new SharedTrace(store.trace) : null;
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
