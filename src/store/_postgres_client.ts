/**
 * The PostgreSQL client (`npm:postgres`, pinned), loaded only when a store connects, and the one place its
 * failures become the store's errors. Private to `postgres.ts`.
 * @module
 */
import type postgres from "npm:postgres@3.4.9";
import { StoreUnavailableError } from "../errors.ts";
import { backoffDelay, type BackoffOptions } from "../retry.ts";
import type { DatabaseUrl } from "../database_url.ts";
import { withoutPassword } from "../database_url.ts";

/** A connection pool, as the client types it. */
export type Sql = postgres.Sql;
/** A transaction's connection. */
export type Tx = postgres.TransactionSql;

/**
 * The client package, pinned. Imported through a variable: Deno tries to download a string-literal dynamic
 * import at start-up even when it never runs, and SQLite users need nothing from a registry.
 */
const CLIENT_PACKAGE = "npm:postgres@3.4.9";

/**
 * The environment variables the client still reads when every option is given: the password when the URL
 * has none, the application name and the session attributes. The task grants exactly these.
 */
export const POSTGRES_ENV: readonly string[] = ["PGPASSWORD", "PGAPPNAME", "PGTARGETSESSIONATTRS"];

/** The pool's wait before reconnecting: 50 ms, doubling, at most 2 s. */
const RECONNECT_BACKOFF: BackoffOptions = { minTimeout: 50, multiplier: 2, maxTimeout: 2000 };

/** Options of {@linkcode connect}. */
export interface ConnectOptions {
  /** Connections in the pool. @default {10} */
  max?: number;
  /** Seconds to wait for a connection before the call fails. @default {10} */
  connectTimeoutSeconds?: number;
}

/**
 * A pool on `url` (no connection is made until the first query). Every option is given, so the client reads
 * no `PG…` variable but {@linkcode POSTGRES_ENV}. Rejects only when the client cannot be loaded.
 */
export async function connect(url: DatabaseUrl, options: ConnectOptions = {}): Promise<Sql> {
  const { max = 10, connectTimeoutSeconds = 10 } = options;
  let open: typeof postgres;
  try {
    open = (await import(CLIENT_PACKAGE) as { default: typeof postgres }).default;
  } catch (error) {
    const reason = (error instanceof Error ? error.message : String(error)).split("\n")[0];
    throw new Error(`Cannot load the PostgreSQL client ${CLIENT_PACKAGE}: ${reason}`);
  }
  const { sslmode, ...connection } = url.params;
  return open({
    host: url.host,
    port: url.port,
    user: url.user,
    database: url.database,
    ...(url.password === "" ? {} : { pass: url.password }),
    ssl: sslmode === undefined || sslmode === "disable" ? false : sslmode as "require",
    sslnegotiation: null,
    max,
    connect_timeout: connectTimeoutSeconds,
    idle_timeout: 0,
    max_lifetime: null,
    max_pipeline: 100,
    // The client runs its own reconnect loop and only asks how many seconds to wait before try `retries`.
    backoff: (retries: number) => backoffDelay(retries, RECONNECT_BACKOFF) / 1000,
    keep_alive: 60,
    prepare: true,
    debug: false,
    fetch_types: false,
    publications: "alltables",
    target_session_attrs: null,
    connection,
    // NOTICEs ("already exists, skipping") are not the user's business.
    onnotice: () => {},
    // The types leave out the nulls the client accepts; given, they keep it from reading PG… variables.
  } as unknown as postgres.Options<Record<string, never>>);
}

/** Error codes of a connection that failed, closed or timed out: the database is unreachable, not wrong. */
const UNREACHABLE = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  // The server: shutting down, crashed, starting, recovering, or out of connections.
  "57P01",
  "57P02",
  "57P03",
  "53300",
]);

const REASONS: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  CONNECT_TIMEOUT: "no answer in time",
  CONNECTION_CLOSED: "the connection closed",
  CONNECTION_ENDED: "the store is closed",
  CONNECTION_DESTROYED: "the connection was destroyed",
  "57P01": "the server is shutting down",
  "57P03": "the server is starting up",
  ENOTFOUND: "unknown host",
};

/**
 * `error` as the store reports it: a {@linkcode StoreUnavailableError} naming the database when it could not
 * be reached, else an `Error` of the same message (the store's own errors as they are); never with the password. `action` says what was
 * being done ("append to session \"s\"").
 */
export function storeFailure(error: unknown, action: string, url: DatabaseUrl): Error {
  const code = String((error as { code?: unknown })?.code ?? "");
  const text = withoutPassword(error instanceof Error ? error.message : String(error), url);
  if (UNREACHABLE.has(code) || (code.startsWith("08") && code.length === 5)) {
    const reason = REASONS[code] ?? `${text} (${code})`;
    return new StoreUnavailableError(
      `Cannot ${action}: the session database ${url.shown} is unavailable (${reason})`,
    );
  }
  // The store's own errors (a missing message, a malformed id or field) carry no code: they go as they are.
  if (code === "") return error instanceof Error ? error : new Error(text);
  const failure = new Error(`Cannot ${action}: ${text}`);
  // The database's error code stays readable; the message is the redacted one.
  return Object.assign(failure, { code });
}
