/**
 * The session store's statements on PostgreSQL ({@linkcode PostgresSql}, the dialect's {@linkcode SessionSql})
 * on the pool or on a transaction's connection. Free text goes and comes back as UTF-8 bytes (`bytea`); lease
 * expiry is on the database's clock (`now()`), so replicas with skewed clocks agree. Private to `postgres.ts`.
 * @module
 */
import type { StoredMessage, UsageEntry } from "../types.ts";
import {
  bytes,
  type MessageRow,
  type RequestRow,
  stateColumn,
  text,
  toKeptResponse,
  toMemoryItem,
  toMessage,
  toPending,
  toRequestRow,
  toSession,
  toTodo,
  toUsage,
} from "./_rows.ts";
import type { Sql, Tx } from "./_postgres_client.ts";
import type { IdleCursor, SessionSql } from "./sql_store.ts";
import type {
  Calibration,
  HeldRequest,
  KeptResponse,
  MemoryItem,
  PendingStep,
  RecalledItem,
  RequestKey,
  Session,
  SessionKey,
  StoredResponse,
  Todo,
} from "./store.ts";

/** The statements on `db`: the pool, or a transaction's connection. */
export class PostgresSql implements SessionSql {
  readonly #db: Sql | Tx;

  constructor(db: Sql | Tx) {
    this.#db = db;
  }

  async session({ userId, sessionId }: SessionKey): Promise<Session | null> {
    const rows = await this.#db`SELECT * FROM sessions WHERE user_id = ${userId} AND id = ${sessionId}`;
    return rows.length === 0 ? null : toSession(rows[0]);
  }

  async createSession({ userId, sessionId }: SessionKey, stamp: string): Promise<void> {
    await this.#db`INSERT INTO sessions (user_id, id, created_at, updated_at)
      VALUES (${userId}, ${sessionId}, ${stamp}, ${stamp}) ON CONFLICT (user_id, id) DO NOTHING`;
  }

  async sessions(userId: string): Promise<Session[]> {
    const rows = await this.#db`SELECT * FROM sessions WHERE user_id = ${userId}
      ORDER BY updated_at DESC, id`;
    return rows.map(toSession);
  }

  async messages({ userId, sessionId }: SessionKey): Promise<StoredMessage[]> {
    const rows = await this.#db`SELECT id, role, content, tool_calls, tool_call_id, created_at, provider_state
      FROM messages
      WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY seq`;
    return rows.map(toMessage);
  }

  async insertMessages({ userId, sessionId }: SessionKey, rows: readonly MessageRow[]): Promise<string[]> {
    // Sent together (pipelined) and run in order, so the read order is the list's.
    const inserted = await Promise.all(
      rows.map(([id, role, content, calls, callId, createdAt, state]) =>
        this.#db`INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id,
          created_at, provider_state)
        VALUES (${userId}, ${sessionId}, ${bytes(id)}, ${role}, ${bytes(content)}, ${calls}, ${bytes(callId)},
          ${bytes(createdAt)}, ${state})
        ON CONFLICT (user_id, session_id, id) DO NOTHING RETURNING role`
      ),
    );
    return inserted.flatMap((result) => result.map((row) => row.role as string));
  }

  async setCalibration({ userId, sessionId }: SessionKey, calibration: Calibration): Promise<void> {
    await this.#db`UPDATE sessions SET calibration = ${JSON.stringify(calibration)}
      WHERE user_id = ${userId} AND id = ${sessionId}`;
  }

  async firstQuestion({ userId, sessionId }: SessionKey): Promise<string | null> {
    const rows = await this.#db`SELECT content FROM messages
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND role = 'user' ORDER BY seq LIMIT 1`;
    return rows.length === 0 || rows[0].content === null ? null : text(rows[0].content);
  }

  async nameSession({ userId, sessionId }: SessionKey, title: string): Promise<void> {
    await this.#db`UPDATE sessions SET title = ${title}
      WHERE user_id = ${userId} AND id = ${sessionId} AND title IS NULL`;
  }

  async setTitle({ userId, sessionId }: SessionKey, title: string | null): Promise<boolean> {
    const rows = await this.#db`UPDATE sessions SET title = ${title}
      WHERE user_id = ${userId} AND id = ${sessionId} RETURNING id`;
    return rows.length === 1;
  }

  async touchSession(
    { userId, sessionId }: SessionKey,
    turns: number,
    stamp: string,
    calibration?: Calibration,
  ): Promise<boolean> {
    // A null calibration keeps the stored one: one round trip either way.
    const calibrated = calibration === undefined ? null : JSON.stringify(calibration);
    const rows = await this.#db`UPDATE sessions SET turn_count = turn_count + ${turns}, updated_at = ${stamp},
      calibration = coalesce(${calibrated}::text, calibration)
      WHERE user_id = ${userId} AND id = ${sessionId} RETURNING title IS NULL AS untitled`;
    return turns > 0 && rows[0]?.untitled === true;
  }

  async deleteMessage({ userId, sessionId }: SessionKey, id: string): Promise<string | null> {
    const rows = await this.#db`DELETE FROM messages
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND id = ${bytes(id)} RETURNING role`;
    return rows.length === 0 ? null : rows[0].role as string;
  }

  async setSummary(key: SessionKey, summary: string, turns: number, stamp: string): Promise<boolean> {
    const rows = await this.#db`UPDATE sessions SET summary = ${summary},
        compacted_turns = compacted_turns + ${turns}, updated_at = ${stamp}
      WHERE user_id = ${key.userId} AND id = ${key.sessionId} RETURNING id`;
    return rows.length === 1;
  }

  async deleteSession({ userId, sessionId }: SessionKey): Promise<boolean> {
    // Messages, todos and the pending step go by ON DELETE CASCADE, in the same transaction.
    const rows = await this.#db`DELETE FROM sessions WHERE user_id = ${userId} AND id = ${sessionId}
      RETURNING id`;
    return rows.length === 1;
  }

  async insertPending({ userId, sessionId }: SessionKey, step: PendingStep): Promise<void> {
    const { runId, turn, step: index, seq, content, toolCalls, asked, createdAt } = step;
    await this.#db`INSERT INTO pending_steps (user_id, session_id, run_id, turn, step, seq, content,
        tool_calls, asked, created_at, provider_state)
      VALUES (${userId}, ${sessionId}, ${runId}, ${turn}, ${index}, ${seq}, ${bytes(content)},
        ${JSON.stringify(toolCalls)}, ${JSON.stringify(asked)}, ${createdAt}, ${
      stateColumn(step.providerState)
    })`;
  }

  async pending({ userId, sessionId }: SessionKey): Promise<PendingStep | null> {
    const rows = await this.#db`SELECT run_id, turn, step, seq, content, tool_calls, asked, created_at,
        provider_state FROM pending_steps WHERE user_id = ${userId} AND session_id = ${sessionId}`;
    return rows.length === 0 ? null : toPending(rows[0]);
  }

  async deletePending({ userId, sessionId }: SessionKey, runId: string): Promise<boolean> {
    const rows = await this.#db`DELETE FROM pending_steps
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND run_id = ${runId} RETURNING run_id`;
    return rows.length === 1;
  }

  async insertTodo(
    { userId, sessionId }: SessionKey,
    text: string,
    stamp: string,
    callId: string | null,
  ): Promise<Todo> {
    const rows = await this.#db`INSERT INTO todos (user_id, session_id, text, created_at, call_id)
      VALUES (${userId}, ${sessionId}, ${bytes(text)}, ${stamp}, ${bytes(callId)})
      RETURNING id, text, completed, created_at, completed_at`;
    return toTodo(rows[0]);
  }

  async todoOfCall({ userId, sessionId }: SessionKey, callId: string): Promise<Todo | null> {
    const rows = await this.#db`SELECT id, text, completed, created_at, completed_at FROM todos
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND call_id = ${bytes(callId)}`;
    return rows.length === 0 ? null : toTodo(rows[0]);
  }

  async todos({ userId, sessionId }: SessionKey): Promise<Todo[]> {
    const rows = await this.#db`SELECT id, text, completed, created_at, completed_at FROM todos
      WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY id`;
    return rows.map(toTodo);
  }

  async completeTodo({ userId, sessionId }: SessionKey, id: number, stamp: string): Promise<Todo | null> {
    const rows = await this
      .#db`UPDATE todos SET completed = 1, completed_at = COALESCE(completed_at, ${stamp})
      WHERE id = ${id} AND user_id = ${userId} AND session_id = ${sessionId}
      RETURNING id, text, completed, created_at, completed_at`;
    return rows.length === 0 ? null : toTodo(rows[0]);
  }

  /** One statement: the row is locked and read as committed last, so the take is a compare-and-set. */
  async takeLease(key: SessionKey, owner: string, ttlMs: number, from: string | null): Promise<string> {
    // Every conflict updates the row (to itself when it is not ours to take), so RETURNING names its holder.
    const rows = await this.#db`INSERT INTO session_leases (user_id, session_id, owner, expires_at)
      VALUES (${key.userId}, ${key.sessionId}, ${owner}, now() + ${ttlMs} * interval '1 millisecond')
      ON CONFLICT (user_id, session_id) DO UPDATE SET
        owner = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
          OR session_leases.owner = ${from} THEN excluded.owner ELSE session_leases.owner END,
        expires_at = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
          OR session_leases.owner = ${from} THEN excluded.expires_at ELSE session_leases.expires_at END,
        wanted = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
          OR session_leases.owner = ${from} THEN session_leases.wanted AND session_leases.owner = excluded.owner
          ELSE true END
      RETURNING owner`;
    return String(rows[0]?.owner);
  }

  async renewLease({ userId, sessionId }: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    const rows = await this.#db`UPDATE session_leases
      SET expires_at = now() + ${ttlMs} * interval '1 millisecond'
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND owner = ${owner} RETURNING owner`;
    return rows.length === 1;
  }

  async releaseLease({ userId, sessionId }: SessionKey, owner: string, mark: string): Promise<boolean> {
    const rows = await this.#db`DELETE FROM session_leases
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND owner IN (${owner}, ${owner + mark})
      RETURNING wanted`;
    return rows[0]?.wanted === true;
  }

  async idleSessions(before: string, after: IdleCursor, limit: number): Promise<Session[]> {
    const rows = await this.#db`SELECT * FROM sessions AS s WHERE updated_at < ${before}
        AND (updated_at, user_id, id) > (${after.updatedAt}, ${after.userId}, ${after.id})
        AND NOT EXISTS (SELECT 1 FROM session_leases AS l
          WHERE l.user_id = s.user_id AND l.session_id = s.id AND l.expires_at > now())
      ORDER BY updated_at, user_id, id LIMIT ${limit}`;
    return rows.map(toSession);
  }

  async deleteSessionTrace({ userId, sessionId }: SessionKey): Promise<void> {
    await this.#db`DELETE FROM trace_events WHERE user_id = ${userId} AND session_id = ${sessionId}`;
  }

  async markLease({ userId, sessionId }: SessionKey, mark: string): Promise<boolean> {
    const rows = await this.#db`UPDATE session_leases
      SET owner = CASE WHEN right(owner, ${mark.length}::int) = ${mark} THEN owner ELSE owner || ${mark} END
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND expires_at > now() RETURNING owner`;
    return rows.length === 1;
  }

  async addUsage({ userId, sessionId }: SessionKey, entry: UsageEntry): Promise<void> {
    const { day, model, promptTokens: prompt, completionTokens: completion, calls, estimatedCalls } = entry;
    const { cachedTokens: cached, cacheWriteTokens: written } = entry;
    // One row per user, day and model: replicas counting at once add up, each upsert on the row's lock.
    await this.#db`INSERT INTO usage_daily AS u (user_id, day, model, prompt_tokens, completion_tokens, calls,
        estimated_calls, cached_tokens, cache_write_tokens)
      VALUES (${userId}, ${day}, ${model}, ${prompt}, ${completion}, ${calls}, ${estimatedCalls}, ${cached},
        ${written})
      ON CONFLICT (user_id, day, model) DO UPDATE SET prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens, calls = u.calls + excluded.calls,
        estimated_calls = u.estimated_calls + excluded.estimated_calls,
        cached_tokens = u.cached_tokens + excluded.cached_tokens,
        cache_write_tokens = u.cache_write_tokens + excluded.cache_write_tokens`;
    // Only for a session of this store: a request's private one is not here.
    await this.#db`INSERT INTO session_usage AS u (user_id, session_id, model, last_day, prompt_tokens,
        completion_tokens, calls, estimated_calls, cached_tokens, cache_write_tokens)
      SELECT ${userId}, ${sessionId}, ${model}, ${day}, ${prompt}, ${completion}, ${calls}, ${estimatedCalls},
        ${cached}, ${written}
      WHERE EXISTS (SELECT 1 FROM sessions WHERE user_id = ${userId} AND id = ${sessionId})
      ON CONFLICT (user_id, session_id, model) DO UPDATE SET last_day = greatest(u.last_day, excluded.last_day),
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens, calls = u.calls + excluded.calls,
        estimated_calls = u.estimated_calls + excluded.estimated_calls,
        cached_tokens = u.cached_tokens + excluded.cached_tokens,
        cache_write_tokens = u.cache_write_tokens + excluded.cache_write_tokens`;
  }

  async userUsage(userId: string, from: string, to: string): Promise<UsageEntry[]> {
    const rows = await this.#db`SELECT day, model, prompt_tokens, cached_tokens, cache_write_tokens,
        completion_tokens, calls, estimated_calls FROM usage_daily WHERE user_id = ${userId} AND day >= ${from} AND day <= ${to}
      ORDER BY day, model`;
    return rows.map(toUsage);
  }

  async sessionUsage({ userId, sessionId }: SessionKey): Promise<UsageEntry[]> {
    const rows = await this.#db`SELECT last_day AS day, model, prompt_tokens, cached_tokens,
        cache_write_tokens, completion_tokens, calls, estimated_calls FROM session_usage WHERE user_id = ${userId} AND session_id = ${sessionId}
      ORDER BY model`;
    return rows.map(toUsage);
  }

  async upsertMemory(userId: string, text: string, norm: string, sessionId: string | null, stamp: string) {
    // One statement, so two replicas writing the same item fold it rather than fail; xmax = 0 on a new row.
    const rows = await this.#db`INSERT INTO user_memory AS m (user_id, text, norm, source_session, first_seen,
        last_seen, last_used)
      VALUES (${userId}, ${text}, ${norm}, ${sessionId}, ${stamp}, ${stamp}, ${stamp})
      ON CONFLICT (user_id, norm) DO UPDATE SET last_seen = excluded.last_seen, last_used = excluded.last_used
      RETURNING id, (xmax = 0) AS added`;
    return { id: Number(rows[0].id), added: rows[0].added === true };
  }

  async trimMemory(userId: string, keep: number): Promise<number> {
    const rows = await this.#db`DELETE FROM user_memory WHERE id IN (SELECT id FROM user_memory
      WHERE user_id = ${userId} ORDER BY last_used DESC, id DESC OFFSET ${keep}) RETURNING id`;
    return rows.length;
  }

  async memory(userId: string): Promise<MemoryItem[]> {
    const rows = await this.#db`SELECT id, text, source_session, first_seen, last_seen, last_used, use_count
      FROM user_memory WHERE user_id = ${userId} ORDER BY id`;
    return rows.map(toMemoryItem);
  }

  async recallMemory(userId: string, terms: readonly string[], limit: number): Promise<RecalledItem[]> {
    // Terms are letters and digits only: joined by |, they are a query of plain words, never syntax.
    const query = terms.join(" | ");
    const rows = await this.#db`SELECT id, text, ts_rank(words, q) AS score
      FROM user_memory, to_tsquery('simple', ${query}) AS q
      WHERE user_id = ${userId} AND words @@ q ORDER BY score DESC, id LIMIT ${limit}`;
    return rows.map((row) => ({ id: Number(row.id), text: row.text as string, score: Number(row.score) }));
  }

  async lockMemory(userId: string): Promise<void> {
    await this.#db`SELECT pg_advisory_xact_lock(hashtext('mini-agent memory ' || current_schema() || ' ' ||
      ${userId}))`;
  }

  async useMemory(userId: string, ids: readonly number[], stamp: string): Promise<void> {
    await this.#db`UPDATE user_memory SET use_count = use_count + 1, last_used = ${stamp}
      WHERE user_id = ${userId}
        AND id = ANY (string_to_array(${ids.join(",")}, ',')::integer[])`;
  }

  async mergeMemoryIndex(): Promise<void> {
    // A GIN index takes new rows into its pending list and merges them itself (VACUUM, fastupdate).
  }

  async deleteMemory(userId: string, id: number | null): Promise<number> {
    const rows = id === null
      ? await this.#db`DELETE FROM user_memory WHERE user_id = ${userId} RETURNING id`
      : await this.#db`DELETE FROM user_memory WHERE user_id = ${userId} AND id = ${id} RETURNING id`;
    return rows.length;
  }

  async insertRequest({ userId, key }: RequestKey, hash: string, at: number): Promise<boolean> {
    // Of two transactions inserting the key at once, the second waits for the first, then does nothing.
    const rows = await this.#db`INSERT INTO idempotency_keys (user_id, key, request_hash, state, created_at)
      VALUES (${userId}, ${key}, ${hash}, 'running', ${at}) ON CONFLICT (user_id, key) DO NOTHING
      RETURNING key`;
    return rows.length === 1;
  }

  async request({ userId, key }: RequestKey): Promise<RequestRow | null> {
    // Locked, and read as last committed: a claim that waited here sees what the one before it wrote.
    const rows = await this.#db`SELECT request_hash, state, status, content_type, body, created_at
      FROM idempotency_keys WHERE user_id = ${userId} AND key = ${key} FOR UPDATE`;
    return rows.length === 0 ? null : toRequestRow(rows[0]);
  }

  async retakeRequest({ userId, key }: RequestKey, hash: string, at: number): Promise<void> {
    await this.#db`UPDATE idempotency_keys SET request_hash = ${hash}, state = 'running', status = NULL,
        content_type = NULL, body = NULL, created_at = ${at}
      WHERE user_id = ${userId} AND key = ${key}`;
  }

  async finishRequest({ userId, key, claimedAt }: HeldRequest, response: StoredResponse): Promise<boolean> {
    const { status, contentType, body } = response;
    const rows = await this.#db`UPDATE idempotency_keys SET state = 'done', status = ${status},
        content_type = ${contentType}, body = ${body}
      WHERE user_id = ${userId} AND key = ${key} AND created_at = ${claimedAt} AND state = 'running'
      RETURNING key`;
    return rows.length === 1;
  }

  async deleteRequest({ userId, key, claimedAt }: HeldRequest): Promise<boolean> {
    const rows = await this.#db`DELETE FROM idempotency_keys
      WHERE user_id = ${userId} AND key = ${key} AND created_at = ${claimedAt} RETURNING key`;
    return rows.length === 1;
  }

  async upsertResponse({ userId, sessionId }: SessionKey, id: string, body: string, stamp: string) {
    await this.#db`INSERT INTO responses (user_id, id, session_id, body, created_at)
      VALUES (${userId}, ${id}, ${sessionId}, ${body}, ${stamp})
      ON CONFLICT (user_id, id) DO UPDATE SET body = EXCLUDED.body`;
  }

  async response(userId: string, id: string): Promise<KeptResponse | null> {
    const rows = await this.#db`SELECT user_id, id, session_id, body, created_at FROM responses
      WHERE user_id = ${userId} AND id = ${id}`;
    return rows.length === 0 ? null : toKeptResponse(rows[0]);
  }

  async pruneRequests(before: number, limit: number): Promise<number> {
    const rows = await this.#db`DELETE FROM idempotency_keys WHERE (user_id, key) IN (SELECT user_id, key
      FROM idempotency_keys WHERE created_at <= ${before} LIMIT ${limit}) RETURNING key`;
    return rows.length;
  }
}
