/**
 * {@linkcode SessionStore} on PostgreSQL, for replicas behind a load balancer: any replica serves any session.
 * Every write is one transaction that first locks the session's row, so two replicas' writes to one session
 * take turns and never deadlock; reads see every replica's commits (no cache); lease expiry uses the
 * database's clock.
 * @module
 */
import type { StoredMessage } from "../types.ts";
import { bytes, toPending, toSession } from "./_rows.ts";
import {
  connect,
  type ConnectOptions,
  POSTGRES_ENV,
  type Sql,
  storeFailure,
  type Tx,
} from "./_postgres_client.ts";
import { migrate } from "./_postgres_schema.ts";
import { PostgresTraceTable } from "./_postgres_trace.ts";
import { acquire, release, renew } from "./_postgres_leases.ts";
import { deleteMessage, insertMessages, readMessages, touchSession } from "./_postgres_messages.ts";
import { completeTodo, insertTodo, selectTodos } from "./_postgres_todos.ts";
import { type DatabaseUrl, parseDatabaseUrl } from "./database_url.ts";
import {
  type AcquireLeaseOptions,
  type LeaseTake,
  type PendingStep,
  type Session,
  type SessionKey,
  type SessionStore,
  type Todo,
  validateId,
  validateKey,
} from "./store.ts";

export { POSTGRES_ENV };

/** Options of {@linkcode PostgresStore.open}. */
export interface PostgresStoreOptions extends ConnectOptions {
  /** The clock for every timestamp the store writes (lease expiry uses the database's). @default {() => new Date()} */
  now?: () => Date;
}

/** How long `ping` waits for an answer. */
const PING_TIMEOUT_MS = 3000;

/** The PostgreSQL session store: one pool per process, shared by every request. */
export class PostgresStore implements SessionStore {
  #sql: Sql;
  #url: DatabaseUrl;
  #now: () => Date;
  /** Every replica's trace events, in this database. */
  readonly trace: PostgresTraceTable;

  private constructor(sql: Sql, url: DatabaseUrl, now: () => Date) {
    this.#sql = sql;
    this.#url = url;
    this.#now = now;
    this.trace = new PostgresTraceTable(sql, (action, work) => this.#run(action, work));
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
    return new PostgresStore(sql, parsed, now);
  }

  /** `work`, its failure as the store reports it (what was being done, never the password). */
  async #run<T>(action: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      throw storeFailure(error, action, this.#url);
    }
  }

  /** `work` on the key's ids (checked first) in one transaction that holds the session row's lock. */
  #write<T>(
    action: string,
    key: SessionKey,
    work: (tx: Tx, userId: string, sessionId: string) => Promise<T>,
  ): Promise<T> {
    return this.#run(`${action} of session "${key.sessionId}"`, async () => {
      const { userId, sessionId } = validateKey(key);
      return await this.#sql.begin(async (tx) => {
        await tx`SELECT 1 FROM sessions WHERE user_id = ${userId} AND id = ${sessionId} FOR UPDATE`;
        return await work(tx, userId, sessionId);
      }) as T;
    });
  }

  /** `work` on the key's ids (checked first), outside a transaction. */
  #read<T>(
    action: string,
    key: SessionKey,
    work: (userId: string, sessionId: string) => Promise<T>,
  ): Promise<T> {
    return this.#run(`${action} of session "${key.sessionId}"`, async () => {
      const { userId, sessionId } = validateKey(key);
      return await work(userId, sessionId);
    });
  }

  async #session(userId: string, sessionId: string): Promise<Session | null> {
    const rows = await this.#sql`SELECT * FROM sessions WHERE user_id = ${userId} AND id = ${sessionId}`;
    return rows.length === 0 ? null : toSession(rows[0]);
  }

  get(key: SessionKey): Promise<Session | null> {
    return this.#read("read", key, (userId, sessionId) => this.#session(userId, sessionId));
  }

  getOrCreate(key: SessionKey): Promise<Session> {
    return this.#read("create", key, async (userId, sessionId) => {
      // Read first: an existing session (every turn but the first) costs no write.
      const session = await this.#session(userId, sessionId);
      if (session !== null) return session;
      const stamp = this.#now().toISOString();
      await this.#sql`INSERT INTO sessions (user_id, id, created_at, updated_at)
        VALUES (${userId}, ${sessionId}, ${stamp}, ${stamp}) ON CONFLICT (user_id, id) DO NOTHING`;
      return (await this.#session(userId, sessionId))!;
    });
  }

  listSessions(userId: string): Promise<Session[]> {
    return this.#run(`list the sessions of user "${userId}"`, async () => {
      const rows = await this.#sql`SELECT * FROM sessions WHERE user_id = ${validateId(userId, "user id")}
        ORDER BY updated_at DESC, id`;
      return rows.map(toSession);
    });
  }

  messages(key: SessionKey): Promise<StoredMessage[]> {
    return this.#read(
      "read the messages",
      key,
      (userId, sessionId) => readMessages(this.#sql, userId, sessionId),
    );
  }

  append(key: SessionKey, messages: readonly StoredMessage[]): Promise<number> {
    return this.#write(
      "append",
      key,
      (tx, userId, sessionId) => insertMessages(tx, userId, sessionId, messages, this.#now),
    );
  }

  savePending(key: SessionKey, step: PendingStep): Promise<void> {
    return this.#write("save the pending step", key, async (tx, userId, sessionId) => {
      const { runId, turn, step: index, seq, content, toolCalls, asked, createdAt } = step;
      await tx`INSERT INTO pending_steps (user_id, session_id, run_id, turn, step, seq, content, tool_calls,
          asked, created_at)
        VALUES (${userId}, ${sessionId}, ${runId}, ${turn}, ${index}, ${seq}, ${bytes(content)},
          ${JSON.stringify(toolCalls)}, ${JSON.stringify(asked)}, ${createdAt})`;
    });
  }

  pendingStep(key: SessionKey): Promise<PendingStep | null> {
    return this.#read("read the pending step", key, async (userId, sessionId) => {
      const rows = await this.#sql`SELECT run_id, turn, step, seq, content, tool_calls, asked, created_at
        FROM pending_steps WHERE user_id = ${userId} AND session_id = ${sessionId}`;
      return rows.length === 0 ? null : toPending(rows[0]);
    });
  }

  resolvePending(key: SessionKey, runId: string, messages: readonly StoredMessage[]): Promise<boolean> {
    return this.#write("resolve the pending step", key, async (tx, userId, sessionId) => {
      const deleted = await tx`DELETE FROM pending_steps
        WHERE user_id = ${userId} AND session_id = ${sessionId} AND run_id = ${runId} RETURNING run_id`;
      if (deleted.length === 0) return false;
      await insertMessages(tx, userId, sessionId, messages, this.#now);
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
    return this.#write("compact", key, async (tx, userId, sessionId) => {
      const stored = await tx`SELECT summary FROM sessions WHERE user_id = ${userId} AND id = ${sessionId}`;
      if (stored.length === 0) throw new Error(`Cannot compact session "${sessionId}": no such session`);
      if (options.previous !== undefined && stored[0].summary !== options.previous) {
        throw new Error(`Cannot compact session "${sessionId}": its summary changed meanwhile`);
      }
      for (const id of cutIds) {
        if (await deleteMessage(tx, userId, sessionId, id) === undefined) {
          throw new Error(`Cannot compact session "${sessionId}": message "${id}" is not stored`);
        }
      }
      await tx`UPDATE sessions SET summary = ${summary}, compacted_turns = compacted_turns + ${turns},
        updated_at = ${this.#now().toISOString()} WHERE user_id = ${userId} AND id = ${sessionId}`;
    });
  }

  discardMessages(key: SessionKey, ids: readonly string[]): Promise<number> {
    return this.#write("discard messages", key, async (tx, userId, sessionId) => {
      let deleted = 0;
      let turns = 0;
      for (const id of ids) {
        const row = await deleteMessage(tx, userId, sessionId, id);
        if (row === undefined) continue;
        deleted += 1;
        if (row.role === "user") turns += 1;
      }
      if (turns > 0) await touchSession(tx, userId, sessionId, -turns, this.#now);
      return deleted;
    });
  }

  deleteSession(key: SessionKey): Promise<boolean> {
    return this.#write("delete", key, async (tx, userId, sessionId) => {
      // Messages, todos and the pending step go by ON DELETE CASCADE, in the same transaction.
      const rows =
        await tx`DELETE FROM sessions WHERE user_id = ${userId} AND id = ${sessionId} RETURNING id`;
      return rows.length === 1;
    });
  }

  addTodo(key: SessionKey, text: string): Promise<Todo> {
    return this.#write(
      "add a todo",
      key,
      (tx, userId, sessionId) => insertTodo(tx, userId, sessionId, text, this.#now),
    );
  }

  listTodos(key: SessionKey): Promise<Todo[]> {
    return this.#read(
      "list the todos",
      key,
      (userId, sessionId) => selectTodos(this.#sql, userId, sessionId),
    );
  }

  completeTodo(key: SessionKey, id: number): Promise<Todo | null> {
    return this.#write(
      "complete a todo",
      key,
      (tx, userId, sessionId) => completeTodo(tx, userId, sessionId, id, this.#now),
    );
  }

  acquireLease(
    key: SessionKey,
    owner: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<LeaseTake> {
    return this.#read(
      "take the lease",
      key,
      (userId, sessionId) => acquire(this.#sql, { userId, sessionId, owner }, ttlMs, options),
    );
  }

  renewLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#read(
      "renew the lease",
      key,
      (userId, sessionId) => renew(this.#sql, userId, sessionId, owner, ttlMs),
    );
  }

  releaseLease(key: SessionKey, owner: string): Promise<boolean> {
    return this.#read(
      "release the lease",
      key,
      (userId, sessionId) => release(this.#sql, userId, sessionId, owner),
    );
  }

  async ping(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), PING_TIMEOUT_MS));
    try {
      const answer = this.#sql`SELECT 1 AS ok`.then((rows) => rows[0]?.ok === 1, () => false);
      return await Promise.race([answer, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for running queries, then closes every connection. */
  async close(): Promise<void> {
    await this.#sql.end({ timeout: 5 });
  }
}
