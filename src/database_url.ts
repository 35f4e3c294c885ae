/**
 * parseDatabaseUrl(): AGENT_DATABASE_URL read once, into what the client connects with, what `--allow-net`
 * must grant, and how the URL may be shown (never with its password).
 * @module
 */
import { redact } from "./redact.ts";

/** A PostgreSQL URL taken apart. */
export interface DatabaseUrl {
  host: string;
  port: number;
  user: string;
  database: string;
  /** The URL's password (URI-decoded), or "" when it has none (the client then reads PGPASSWORD). */
  password: string;
  /** The password as the URL spells it and decoded: what no message may contain. */
  secrets: string[];
  /** Connection parameters from the query string (`?search_path=…`, `?sslmode=…`), passed on as they are. */
  params: Record<string, string>;
  /** `host:port`, as `--allow-net` spells it. */
  netHost: string;
  /** The URL without its password or query: what messages, logs and `/healthz` may show. */
  shown: string;
}

/**
 * Reads `postgres://user[:password]@host[:port]/database[?params]` (`postgresql://` too; the port defaults to
 * 5432, the database to the user). A `TypeError` that never quotes the password when it is not one.
 */
export function parseDatabaseUrl(text: string): DatabaseUrl {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new TypeError("expected postgres://user@host:port/database, got text that is not a URL");
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new TypeError(`expected postgres://user@host:port/database, got a ${url.protocol} URL`);
  }
  if (url.hostname === "" || url.username === "") {
    throw new TypeError("expected postgres://user@host:port/database: the user and host are required");
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = url.port === "" ? 5432 : Number(url.port);
  const user = decodeURIComponent(url.username);
  const database = decodeURIComponent(url.pathname.slice(1)) || user;
  const netHost = `${url.hostname}:${port}`;
  const shown = `${url.protocol}//${url.username}@${netHost}/${encodeURIComponent(database)}`;
  const params = Object.fromEntries(url.searchParams);
  const password = decodeURIComponent(url.password);
  const secrets = [password, url.password];
  return { host, port, user, database, password, secrets, params, netHost, shown };
}

/** `text` with the URL's password (as spelled and decoded) replaced by `[redacted]`. Never throws. */
export function withoutPassword(text: string, url: DatabaseUrl): string {
  return redact(text, url.secrets);
}
