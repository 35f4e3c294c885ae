/**
 * {@linkcode SessionStore} on PostgreSQL, for replicas behind a load balancer: any replica serves any session.
 * Every write is one transaction that first locks the session's row, so two replicas' writes to one session
 * take turns and never deadlock; reads see every replica's commits (no cache); lease expiry uses the
 * database's clock.
 * @module
 */
import type { StoredMessage } from "../types.ts";
import { type Row, toMessage, toPending, toRow, toSession, toTodo } from "./_rows.ts";
import {
  connect,
  type ConnectOptions,
  POSTGRES_ENV,
  type Sql,
  storeFailure,
  type Tx,
} from "./_postgres_client.ts";
import { migrate, PG_SCHEMA_VERSION } from "./_postgres_schema.ts";
import { TraceTable } from "./_postgres_trace.ts";
import { acquire, release, renew } from "./_postgres_leases.ts";
import { type DatabaseUrl, parseDatabaseUrl } from "./database_url.ts";
import {
  type PendingStep,
  type Session,
  type SessionKey,
  type SessionStore,
  type Todo,
  validateId,
  validateKey,
} from "./store.ts";

export { PG_SCHEMA_VERSION, POSTGRES_ENV };

/** Options of {@linkcode PostgresStore.open}. */
export interface PostgresStoreOptions extends ConnectOptions {
  /** The clock for every timestamp the store writes (lease expiry uses the database's). @default {() => new Date()} */
  now?: () => Date;
}

const encoder = new TextEncoder();
const bytes = (text: string | null) => text === null ? null : encoder.encode(text);
/** The largest todo id the `integer` column holds: a larger one names no todo. */
const MAX_TODO_ID = 2 ** 31 - 1;
/** How long `ping` waits for an answer. */
const PING_TIMEOUT_MS = 3000;

/** The PostgreSQL session store: one pool per process, shared by every request. */
export class PostgresStore implements SessionStore {
  #sql: Sql;
  #url: DatabaseUrl;
  #now: () => Date;
  /** Every replica's trace events, in this database. */
  readonly trace: TraceTable;

  private constructor(sql: Sql, url: DatabaseUrl, now: () => Date) {
    this.#sql = sql;
    this.#url = url;
    this.#now = now;
    this.trace = new TraceTable(sql, (action, work) => this.#run(action, work));
  }

  /**
   * Connects to `url` and brings its schema to {@linkcode PG_SCHEMA_VERSION}. Rejects with a
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
    return this.#read("read the messages", key, async (userId, sessionId) => {
      const rows = await this
        .#sql`SELECT id, role, content, tool_calls, tool_call_id, created_at FROM messages
        WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY seq`;
      return rows.map(toMessage);
    });
  }

  append(key: SessionKey, messages: readonly StoredMessage[]): Promise<number> {
    return this.#write(
      "append",
      key,
      (tx, userId, sessionId) => this.#insert(tx, userId, sessionId, messages),
    );
  }

  /** Inserts the new ones of `messages` inside the caller's transaction; resolves to how many were new. */
  async #insert(
    tx: Tx,
    userId: string,
    sessionId: string,
    messages: readonly StoredMessage[],
  ): Promise<number> {
    // All checked before the first insert: a malformed message changes nothing.
    const rows = messages.map(toRow);
    // Sent together (pipelined) and run in order, so the read order is the list's.
    const inserted = await Promise.all(
      rows.map(([id, role, content, calls, callId, createdAt]) =>
        tx`INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at)
        VALUES (${userId}, ${sessionId}, ${bytes(id)}, ${role}, ${bytes(content)}, ${calls}, ${bytes(callId)},
          ${bytes(createdAt)})
        ON CONFLICT (user_id, session_id, id) DO NOTHING RETURNING role`
      ),
    );
    const added = inserted.filter((result) => result.length === 1);
    const turns = added.filter((result) => result[0].role === "user").length;
    if (added.length > 0) await this.#touch(tx, userId, sessionId, turns);
    return added.length;
  }

  async #touch(tx: Tx, userId: string, sessionId: string, turns: number): Promise<void> {
    await tx`UPDATE sessions SET turn_count = turn_count + ${turns}, updated_at = ${this.#now().toISOString()}
      WHERE user_id = ${userId} AND id = ${sessionId}`;
  }

  /** Deletes the session's message `id`; resolves to its row (`role`), or undefined when not stored. */
  async #delete(tx: Tx, userId: string, sessionId: string, id: string): Promise<Row | undefined> {
    const rows = await tx`DELETE FROM messages
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND id = ${bytes(id)} RETURNING role`;
    return rows[0];
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
      await this.#insert(tx, userId, sessionId, messages);
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
        if (await this.#delete(tx, userId, sessionId, id) === undefined) {
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
        const row = await this.#delete(tx, userId, sessionId, id);
        if (row === undefined) continue;
        deleted += 1;
        if (row.role === "user") turns += 1;
      }
      if (turns > 0) await this.#touch(tx, userId, sessionId, -turns);
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
    return this.#write("add a todo", key, async (tx, userId, sessionId) => {
      const rows = await tx`INSERT INTO todos (user_id, session_id, text, created_at)
        VALUES (${userId}, ${sessionId}, ${bytes(text)}, ${this.#now().toISOString()})
        RETURNING id, text, completed, created_at, completed_at`;
      return toTodo(rows[0]);
    });
  }

  listTodos(key: SessionKey): Promise<Todo[]> {
    return this.#read("list the todos", key, async (userId, sessionId) => {
      const rows = await this.#sql`SELECT id, text, completed, created_at, completed_at FROM todos
        WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY id`;
      return rows.map(toTodo);
    });
  }

  completeTodo(key: SessionKey, id: number): Promise<Todo | null> {
    return this.#write("complete a todo", key, async (tx, userId, sessionId) => {
      if (!Number.isInteger(id) || id < 1 || id > MAX_TODO_ID) return null;
      const rows = await tx`UPDATE todos SET completed = 1,
          completed_at = COALESCE(completed_at, ${this.#now().toISOString()})
        WHERE id = ${id} AND user_id = ${userId} AND session_id = ${sessionId}
        RETURNING id, text, completed, created_at, completed_at`;
      return rows.length === 0 ? null : toTodo(rows[0]);
    });
  }

  acquireLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#read(
      "take the lease",
      key,
      (userId, sessionId) => acquire(this.#sql, userId, sessionId, owner, ttlMs),
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
