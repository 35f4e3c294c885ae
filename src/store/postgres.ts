/**
 * The session store on PostgreSQL, for replicas behind a load balancer: any replica serves any session. The
 * rules are the {@linkcode SqlStore}'s; this is the dialect: a pool, every write one transaction that first
 * locks the session's row, so two replicas' writes to one session take turns and never deadlock; reads see
 * every replica's commits (no cache); lease expiry uses the database's clock.
 * @module
 */
import { connect, type ConnectOptions, POSTGRES_ENV, type Sql, storeFailure } from "./_postgres_client.ts";
import { migrate } from "./_postgres_schema.ts";
import { PostgresSql } from "./_postgres_sql.ts";
import { PostgresTraceTable } from "./_postgres_trace.ts";
import { type DatabaseUrl, parseDatabaseUrl } from "../database_url.ts";
import { type SessionSql, type SqlDialect, SqlStore } from "./sql_store.ts";
import type { SessionKey } from "./store.ts";

export { POSTGRES_ENV };

/** Options of {@linkcode PostgresStore.open}. */
export interface PostgresStoreOptions extends ConnectOptions {
  /** The clock for every timestamp the store writes (lease expiry uses the database's). @default {() => new Date()} */
  now?: () => Date;
}

/** How long `ping` waits for an answer. */
const PING_TIMEOUT_MS = 3000;

/** The PostgreSQL session store: one pool per process, shared by every request. */
export class PostgresStore extends SqlStore {
  /** Every replica's trace events, in this database. */
  readonly trace: PostgresTraceTable;

  private constructor(db: PostgresDatabase, now: () => Date) {
    super(db, now);
    this.trace = new PostgresTraceTable(db.sql, (action, work) => db.run(action, work));
  }

  /**
   * Connects to `url` and brings its schema to `SCHEMA_VERSION` (`store.ts`). Rejects with a
   * `StoreUnavailableError` when the database cannot be reached, and with a `TypeError` for a malformed URL;
   * no message contains the password.
   */
  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const { now = () => new Date(), ...connectOptions } = options;
    const parsed = parseDatabaseUrl(url);
    const sql = await connect(parsed, connectOptions);
    try {
      await migrate(sql);
    } catch (error) {
      await sql.end({ timeout: 0 });
      throw storeFailure(error, "open the session database", parsed);
    }
    return new PostgresStore(new PostgresDatabase(sql, parsed), now);
  }
}

/** The pool as the store's dialect. */
class PostgresDatabase implements SqlDialect {
  readonly sql: Sql;
  readonly #url: DatabaseUrl;
  readonly #statements: PostgresSql;

  constructor(sql: Sql, url: DatabaseUrl) {
    this.sql = sql;
    this.#url = url;
    this.#statements = new PostgresSql(sql);
  }

  /** `work`, its failure as the store reports it (what was being done, never the password). */
  async run<T>(action: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      throw storeFailure(error, action, this.#url);
    }
  }

  read<T>(action: string, work: (sql: SessionSql) => Promise<T>): Promise<T> {
    return this.run(action, () => work(this.#statements));
  }

  write<T>(action: string, key: SessionKey | null, work: (sql: SessionSql) => Promise<T>): Promise<T> {
    return this.run(action, async () => {
      return await this.sql.begin(async (tx) => {
        if (key !== null) {
          await tx`SELECT 1 FROM sessions WHERE user_id = ${key.userId} AND id = ${key.sessionId} FOR UPDATE`;
        }
        return await work(new PostgresSql(tx));
      }) as T;
    });
  }

  async ping(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), PING_TIMEOUT_MS));
    try {
      const answer = this.sql`SELECT 1 AS ok`.then((rows) => rows[0]?.ok === 1, () => false);
      return await Promise.race([answer, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for running queries, then closes every connection. */
  async close(): Promise<void> {
    await this.sql.end({ timeout: 5 });
  }
}
