/**
 * SqlStore: the session store's rules, written once over a SQL dialect. The rules say what a write reads,
 * checks and changes, in which order: an append counts the user turns it adds and names a session without a
 * title from its first question, a rename's title is kept over later messages, a compaction is refused
 * whole for a changed summary or a missing message (and with it the memory it would write), a discard takes
 * its user turns off the count, a pending step resolves once, a memory write folds equal items and keeps the
 * user's limit, an idempotency key is claimed once (a claim past its day, or running past its bound, taken
 * over). A dialect ({@linkcode SqlDialect}) gives the statements ({@linkcode SessionSql}) and
 * the transaction they run in; SQLite (`sqlite.ts`) and PostgreSQL (`postgres.ts`) are the two.
 * @module
 */
import type { StoredMessage, UsageEntry } from "../types.ts";
import { type MessageRow, type RequestRow, toRow } from "./_rows.ts";
import { memoryKey, recallTerms } from "./memory_text.ts";
import { givenTitle, titleFrom } from "../text/title.js";
import {
  type AcquireLeaseOptions,
  type Calibration,
  CANCEL_MARK,
  type ClaimRequestOptions,
  type HealthStore,
  type HeldRequest,
  IDEMPOTENCY_KEEP_MS,
  IDEMPOTENCY_RUNNING_MS,
  type KeptResponse,
  leaseFrom,
  type LeaseTake,
  leaseTtl,
  type MemoryItem,
  type MemoryWrite,
  type MemoryWritten,
  type PendingStep,
  type RecalledItem,
  type RequestClaim,
  type RequestKey,
  type Session,
  type SessionKey,
  type SessionStore,
  type StoredResponse,
  type Todo,
  type UsageOptions,
  type UsageRange,
  validateId,
  validateKey,
  validateRequestKey,
} from "./store.ts";

/**
 * The statements the rules run, each one statement of the dialect's SQL (or, where said, a few that are
 * atomic together). Keys are checked before they reach a statement.
 */
export interface SessionSql {
  session(key: SessionKey): Promise<Session | null>;
  /** Inserts the session unless it exists. */
  createSession(key: SessionKey, stamp: string): Promise<void>;
  /** The user's sessions, most recently updated first. */
  sessions(userId: string): Promise<Session[]>;
  /** The session's messages, oldest first: a new array of frozen messages. */
  messages(key: SessionKey): Promise<StoredMessage[]>;
  /** Inserts those of `rows` whose id is not stored yet, in order; resolves to the roles of those inserted. */
  insertMessages(key: SessionKey, rows: readonly MessageRow[]): Promise<string[]>;
  /** Stores the session's calibration. */
  setCalibration(key: SessionKey, calibration: Calibration): Promise<void>;
  /** The text of the session's first stored `user` message, or null when it has none. */
  firstQuestion(key: SessionKey): Promise<string | null>;
  /** Sets the session's title when it has none. */
  nameSession(key: SessionKey, title: string): Promise<void>;
  /** Sets the session's title (null: none); false when there is no such session. */
  setTitle(key: SessionKey, title: string | null): Promise<boolean>;
  /**
   * Adds `turns` (negative: removes) to the session's turn count and stamps it updated, storing `calibration`
   * when given; true when it added turns (`turns` > 0) to a session that has no title.
   */
  touchSession(key: SessionKey, turns: number, stamp: string, calibration?: Calibration): Promise<boolean>;
  /** Deletes message `id`; resolves to its role, or null when it is not stored. */
  deleteMessage(key: SessionKey, id: string): Promise<string | null>;
  /** Sets the summary and adds `turns` to the compacted turns; false when there is no such session. */
  setSummary(key: SessionKey, summary: string, turns: number, stamp: string): Promise<boolean>;
  /** Deletes the session with everything that goes with it (by cascade); false when there was none. */
  deleteSession(key: SessionKey): Promise<boolean>;
  insertPending(key: SessionKey, step: PendingStep): Promise<void>;
  pending(key: SessionKey): Promise<PendingStep | null>;
  /** Deletes the pending step of `runId`; false when the session has none of that run. */
  deletePending(key: SessionKey, runId: string): Promise<boolean>;
  /** Inserts an open todo, added by the tool call `callId` (null: by none). */
  insertTodo(key: SessionKey, text: string, stamp: string, callId: string | null): Promise<Todo>;
  /** The todo the tool call `callId` added, or null. */
  todoOfCall(key: SessionKey, callId: string): Promise<Todo | null>;
  todos(key: SessionKey): Promise<Todo[]>;
  /** Marks todo `id` completed, keeping its first completion time; null when the session has no such todo. */
  completeTodo(key: SessionKey, id: number, stamp: string): Promise<Todo | null>;
  /**
   * Atomic on its own: takes the lease for `owner` until `ttlMs` from now when it is free, expired, already
   * `owner`'s or `from`'s, else marks it wanted; resolves to its holder after. "Now" is the dialect's clock:
   * SQLite takes `now`, PostgreSQL its own.
   */
  takeLease(key: SessionKey, owner: string, ttlMs: number, from: string | null, now: Date): Promise<string>;
  /** Extends `owner`'s lease to `ttlMs` from now; false when another holds it or none is there. */
  renewLease(key: SessionKey, owner: string, ttlMs: number, now: Date): Promise<boolean>;
  /** Deletes `owner`'s lease, or `owner + mark`'s; true when it was marked wanted. */
  releaseLease(key: SessionKey, owner: string, mark: string): Promise<boolean>;
  /** Appends `mark` to the owner of the live lease unless it ends with it; false when none is live. */
  markLease(key: SessionKey, mark: string, now: Date): Promise<boolean>;
  /**
   * At most `limit` sessions last written before `before` whose lease is not held at `now` (the dialect's
   * clock, as for leases), ordered by (updated_at, user id, id) and after `after` in that order.
   */
  idleSessions(before: string, after: IdleCursor, limit: number, now: Date): Promise<Session[]>;
  /** Deletes every trace event of the session (of this id and any earlier one of the same id). */
  deleteSessionTrace(key: SessionKey): Promise<void>;
  /**
   * Adds `entry` to the user's row of its day and model, and to the session's row of its model when the
   * session exists (a request's private session is not in this store).
   */
  addUsage(key: SessionKey, entry: UsageEntry): Promise<void>;
  /** The user's rows from day `from` to day `to` (inclusive), by day, then model. */
  userUsage(userId: string, from: string, to: string): Promise<UsageEntry[]>;
  /** The session's rows, by model. */
  sessionUsage(key: SessionKey): Promise<UsageEntry[]>;
  /**
   * The user's item of key `norm` ({@linkcode memoryKey}): inserted with `text`, from `sessionId`, seen and
   * used at `stamp`; or, when the user has one, seen and used again at `stamp`. Resolves to its id and whether
   * it is new.
   */
  upsertMemory(
    userId: string,
    text: string,
    norm: string,
    sessionId: string | null,
    stamp: string,
  ): Promise<{ id: number; added: boolean }>;
  /** Deletes the user's items beyond the `keep` most recently used (ties: the lower id leaves); how many. */
  trimMemory(userId: string, keep: number): Promise<number>;
  /** The user's items, by id. */
  memory(userId: string): Promise<MemoryItem[]>;
  /** At most `limit` of the user's items matching any of `terms` (none empty), best first, then by id. */
  recallMemory(userId: string, terms: readonly string[], limit: number): Promise<RecalledItem[]>;
  /**
   * Holds the user's memory until the transaction ends, before it writes any of the user's items: two
   * transactions (two sessions of one user, on two replicas) then change those rows one after the other, never
   * each holding a row the other waits for. Nothing to do where writers take turns anyway (SQLite).
   */
  lockMemory(userId: string): Promise<void>;
  /** Adds one to the use count of the user's items `ids` and stamps them used. */
  useMemory(userId: string, ids: readonly number[], stamp: string): Promise<void>;
  /** Deletes the user's item `id`, or all the user's items (null); resolves to how many. */
  deleteMemory(userId: string, id: number | null): Promise<number>;
  /** Some work towards fewer pieces of the memory's full-text index after new items, where it has pieces. */
  mergeMemoryIndex(): Promise<void>;
  /**
   * Inserts a running claim of `key` for `hash`, made at `at` (ms), unless the user has a claim of that key
   * (then it waits for a claim another transaction inserts, and does nothing); true when it inserted.
   */
  insertRequest(key: RequestKey, hash: string, at: number): Promise<boolean>;
  /** The claim of `key`, held against every other writer until the transaction ends; null when none. */
  request(key: RequestKey): Promise<RequestRow | null>;
  /** Makes the claim of `key` a new running one of `hash`, made at `at`, without a response. */
  retakeRequest(key: RequestKey, hash: string, at: number): Promise<void>;
  /** Stores `response` in the running claim `held`, now done; false when that claim is not there running. */
  finishRequest(held: HeldRequest, response: StoredResponse): Promise<boolean>;
  /** Deletes the claim `held`; false when that claim is not there. */
  deleteRequest(held: HeldRequest): Promise<boolean>;
  /** Deletes at most `limit` claims made at `before` (ms) or earlier; resolves to how many. */
  pruneRequests(before: number, limit: number): Promise<number>;
  /** Inserts (or replaces the body of) response `id` of the session `key`, made at `stamp` (ISO). */
  upsertResponse(key: SessionKey, id: string, body: string, stamp: string): Promise<void>;
  /** The user's response `id`, or null. */
  response(userId: string, id: string): Promise<KeptResponse | null>;
}

/** Where a page of {@linkcode SqlStore.idleSessions} starts: after the session of these fields. */
export type IdleCursor = Pick<Session, "updatedAt" | "userId" | "id">;

/** The start of the first page of idle sessions: before every session. */
const FIRST_IDLE: IdleCursor = { updatedAt: "", userId: "", id: "" };

/** Where the statements run. `action` says what is being done, for the dialect's error messages. */
export interface SqlDialect extends HealthStore {
  /** `work` outside a transaction: each statement on its own. */
  read<T>(action: string, work: (sql: SessionSql) => Promise<T>): Promise<T>;
  /**
   * `work` in one transaction, which holds the session `key` (none: null) against every other writer until it
   * ends.
   */
  write<T>(action: string, key: SessionKey | null, work: (sql: SessionSql) => Promise<T>): Promise<T>;
}

/** Adds each of `usage` inside the caller's transaction; a `TypeError` for an entry that is not counts. */
async function addUsage(sql: SessionSql, key: SessionKey, usage: readonly UsageEntry[] = []): Promise<void> {
  for (const entry of usage) await sql.addUsage(key, checkedEntry(entry));
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;

function checkedEntry(entry: UsageEntry): UsageEntry {
  const { promptTokens: prompt, cachedTokens: cached, cacheWriteTokens: written } = entry;
  const counts = [prompt, cached, written, entry.completionTokens, entry.calls, entry.estimatedCalls];
  if (!counts.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    throw new TypeError("Cannot count tokens: every count must be a whole number of 0 or more");
  }
  if (cached + written > prompt) {
    throw new TypeError(
      `Cannot count tokens: ${cached} cached and ${written} cache-written tokens are more than the ${prompt} prompt tokens`,
    );
  }
  if (!DAY.test(entry.day) || typeof entry.model !== "string" || entry.model === "") {
    throw new TypeError(
      `Cannot count tokens: day must be YYYY-MM-DD and model a non-empty string, got ${
        JSON.stringify(entry.day)
      }`,
    );
  }
  return entry;
}

/**
 * Merges `write` into the user's memory inside the caller's transaction: each item upserted, then the user's
 * items trimmed to the limit.
 */
async function writeMemory(
  sql: SessionSql,
  userId: string,
  write: MemoryWrite,
  sessionId: string | null,
  stamp: string,
): Promise<MemoryWritten> {
  const { items, limit } = write;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new RangeError(`Cannot write the user's memory: the limit must be an integer >= 1, got ${limit}`);
  }
  const ids: number[] = [];
  let added = 0;
  await sql.lockMemory(userId);
  for (const text of items) {
    if (typeof text !== "string" || text.trim() === "") {
      throw new TypeError("Cannot write the user's memory: every item must be a non-empty string");
    }
    const item = await sql.upsertMemory(userId, text, memoryKey(text), sessionId, stamp);
    if (ids.includes(item.id)) continue;
    ids.push(item.id);
    if (item.added) added += 1;
  }
  const evicted = await sql.trimMemory(userId, limit);
  // Every recall reads the index, a write is rare: the write pays to keep the index in few pieces.
  if (added > 0) await sql.mergeMemoryIndex();
  return { ids, added, evicted };
}

/** The title of the session's first stored question, or null (none, or one with no text). */
async function firstQuestionTitle(sql: SessionSql, key: SessionKey): Promise<string | null> {
  const title = titleFrom(await sql.firstQuestion(key) ?? "");
  return title === "" ? null : title;
}

/** The largest todo or memory item id the stores hold (PostgreSQL's `integer`): a larger one names none. */
const MAX_ROW_ID = 2 ** 31 - 1;

/** Whether `id` can name a row: a todo's or a memory item's id is an integer from 1 to 2^31 - 1. */
function isRowId(id: number): boolean {
  return Number.isInteger(id) && id >= 1 && id <= MAX_ROW_ID;
}

/** A {@linkcode SessionStore} on a {@linkcode SqlDialect}; every timestamp it writes is from `now`. */
export class SqlStore implements SessionStore {
  readonly #db: SqlDialect;
  readonly #now: () => Date;

  constructor(db: SqlDialect, now: () => Date = () => new Date()) {
    this.#db = db;
    this.#now = now;
  }

  #stamp(): string {
    return this.#now().toISOString();
  }

  /** `work` on the checked key, outside a transaction. */
  #read<T>(action: string, key: SessionKey, work: (sql: SessionSql, key: SessionKey) => Promise<T>) {
    return this.#db.read(`${action} of session "${key.sessionId}"`, (sql) => work(sql, validateKey(key)));
  }

  /** `work` on the key, checked first, in one transaction that holds the session. */
  async #write<T>(action: string, key: SessionKey, work: (sql: SessionSql, key: SessionKey) => Promise<T>) {
    validateKey(key);
    return await this.#db.write(`${action} of session "${key.sessionId}"`, key, (sql) => work(sql, key));
  }

  get(key: SessionKey): Promise<Session | null> {
    return this.#read("read", key, (sql, key) => sql.session(key));
  }

  getOrCreate(key: SessionKey): Promise<Session> {
    return this.#read("create", key, async (sql, key) => {
      // Read first: an existing session (every turn but the first) costs no write.
      const session = await sql.session(key);
      if (session !== null) return session;
      await sql.createSession(key, this.#stamp());
      return (await sql.session(key))!;
    });
  }

  listSessions(userId: string): Promise<Session[]> {
    return this.#readUser("list the sessions", userId, (sql, userId) => sql.sessions(userId));
  }

  messages(key: SessionKey): Promise<StoredMessage[]> {
    return this.#read("read the messages", key, (sql, key) => sql.messages(key));
  }

  append(
    key: SessionKey,
    messages: readonly StoredMessage[],
    options: UsageOptions & { calibration?: Calibration; memoryUsed?: readonly number[] } = {},
  ): Promise<number> {
    const used = (options.memoryUsed ?? []).filter((id) => isRowId(id));
    return this.#write("append", key, async (sql, key) => {
      const { calibration } = options;
      const added = await this.#insert(sql, key, messages, calibration);
      // With messages, the calibration went with the session's update; without, it is stored alone.
      if (added === 0 && calibration !== undefined) await sql.setCalibration(key, calibration);
      if (used.length > 0) {
        await sql.lockMemory(key.userId);
        await sql.useMemory(key.userId, used, this.#stamp());
      }
      await addUsage(sql, key, options.usage);
      return added;
    });
  }

  /**
   * Inserts the new ones of `messages` inside the caller's transaction, counting the user turns they add, and
   * stores `calibration` with the session's update when any was new.
   */
  async #insert(
    sql: SessionSql,
    key: SessionKey,
    messages: readonly StoredMessage[],
    calibration?: Calibration,
  ): Promise<number> {
    // All checked before the first insert: a malformed message changes nothing.
    const roles = await sql.insertMessages(key, messages.map(toRow));
    const turns = roles.filter((role) => role === "user").length;
    const untitled = roles.length > 0 && await sql.touchSession(key, turns, this.#stamp(), calibration);
    if (turns > 0 && untitled) {
      const title = await firstQuestionTitle(sql, key);
      if (title !== null) await sql.nameSession(key, title);
    }
    return roles.length;
  }

  async renameSession(key: SessionKey, title: string): Promise<Session | null> {
    const given = givenTitle(title);
    return await this.#write("rename", key, async (sql, key) => {
      const named = given !== "" ? given : await firstQuestionTitle(sql, key);
      if (!await sql.setTitle(key, named)) return null;
      return await sql.session(key);
    });
  }

  savePending(key: SessionKey, step: PendingStep, options: UsageOptions = {}): Promise<void> {
    return this.#write("save the pending step", key, async (sql, key) => {
      await sql.insertPending(key, step);
      await addUsage(sql, key, options.usage);
    });
  }

  recordUsage(key: SessionKey, usage: readonly UsageEntry[]): Promise<void> {
    return this.#write("count the tokens", key, (sql, key) => addUsage(sql, key, usage));
  }

  userUsage(userId: string, range: UsageRange = {}): Promise<UsageEntry[]> {
    const { from = "0000-00-00", to = "9999-99-99" } = range;
    return this.#readUser("read the token counts", userId, (sql, userId) => sql.userUsage(userId, from, to));
  }

  sessionUsage(key: SessionKey): Promise<UsageEntry[]> {
    return this.#read("read the token counts", key, (sql, key) => sql.sessionUsage(key));
  }

  pendingStep(key: SessionKey): Promise<PendingStep | null> {
    return this.#read("read the pending step", key, (sql, key) => sql.pending(key));
  }

  resolvePending(key: SessionKey, runId: string, messages: readonly StoredMessage[]): Promise<boolean> {
    return this.#write("resolve the pending step", key, async (sql, key) => {
      if (!await sql.deletePending(key, runId)) return false;
      await this.#insert(sql, key, messages);
      return true;
    });
  }

  applyCompaction(
    key: SessionKey,
    summary: string,
    cutIds: readonly string[],
    turns: number,
    options: { previous?: string | null; memory?: MemoryWrite } = {},
  ): Promise<MemoryWritten | null> {
    return this.#write("compact", key, async (sql, key) => {
      const refuse = (why: string) => new Error(`Cannot compact session "${key.sessionId}": ${why}`);
      const stored = await sql.session(key);
      if (stored === null) throw refuse("no such session");
      if (options.previous !== undefined && stored.summary !== options.previous) {
        throw refuse("its summary changed meanwhile");
      }
      for (const id of cutIds) {
        if (await sql.deleteMessage(key, id) === null) throw refuse(`message "${id}" is not stored`);
      }
      if (!await sql.setSummary(key, summary, turns, this.#stamp())) throw refuse("no such session");
      const { memory } = options;
      if (memory === undefined || memory.items.length === 0) return null;
      return await writeMemory(sql, key.userId, memory, key.sessionId, this.#stamp());
    });
  }

  /** `work` for the checked user, in one transaction that holds no session. */
  #writeUser<T>(action: string, userId: string, work: (sql: SessionSql, userId: string) => Promise<T>) {
    const checked = validateId(userId, "user id");
    return this.#db.write(`${action} of user "${userId}"`, null, (sql) => work(sql, checked));
  }

  /** `work` for the checked user, outside a transaction. */
  #readUser<T>(action: string, userId: string, work: (sql: SessionSql, userId: string) => Promise<T>) {
    return this.#db.read(`${action} of user "${userId}"`, (sql) => work(sql, validateId(userId, "user id")));
  }

  remember(
    userId: string,
    write: MemoryWrite,
    options: { sessionId?: string | null } = {},
  ): Promise<MemoryWritten> {
    const { sessionId = null } = options;
    if (sessionId !== null) validateId(sessionId);
    return this.#writeUser("write the memory", userId, (sql, userId) => {
      return writeMemory(sql, userId, write, sessionId, this.#stamp());
    });
  }

  recallMemory(userId: string, text: string, limit: number): Promise<RecalledItem[]> {
    return this.#readUser("recall the memory", userId, async (sql, userId) => {
      const terms = recallTerms(text);
      if (terms.length === 0 || !(limit >= 1)) return [];
      return await sql.recallMemory(userId, terms, Math.floor(limit));
    });
  }

  useMemory(userId: string, ids: readonly number[]): Promise<void> {
    if (ids.length === 0) return Promise.resolve();
    return this.#writeUser("count the memory's use", userId, async (sql, userId) => {
      await sql.lockMemory(userId);
      await sql.useMemory(userId, ids.filter((id) => isRowId(id)), this.#stamp());
    });
  }

  listMemory(userId: string): Promise<MemoryItem[]> {
    return this.#readUser("list the memory", userId, (sql, userId) => sql.memory(userId));
  }

  forgetMemory(userId: string, id?: number): Promise<number> {
    return this.#writeUser("forget the memory", userId, async (sql, userId) => {
      await sql.lockMemory(userId);
      if (id === undefined) return await sql.deleteMemory(userId, null);
      return isRowId(id) ? await sql.deleteMemory(userId, id) : 0;
    });
  }

  discardMessages(key: SessionKey, ids: readonly string[]): Promise<number> {
    return this.#write("discard messages", key, async (sql, key) => {
      let deleted = 0;
      let turns = 0;
      for (const id of ids) {
        const role = await sql.deleteMessage(key, id);
        if (role === null) continue;
        deleted += 1;
        if (role === "user") turns += 1;
      }
      if (turns > 0) await sql.touchSession(key, -turns, this.#stamp());
      return deleted;
    });
  }

  deleteSession(key: SessionKey): Promise<boolean> {
    return this.#write("delete", key, (sql, key) => sql.deleteSession(key));
  }

  addTodo(key: SessionKey, text: string, options: { callId?: string } = {}): Promise<Todo> {
    const { callId = null } = options;
    return this.#write("add a todo", key, async (sql, key) => {
      // Read in the same transaction: of two runs of one call, the second finds the first's todo.
      const added = callId === null ? null : await sql.todoOfCall(key, callId);
      return added ?? await sql.insertTodo(key, text, this.#stamp(), callId);
    });
  }

  listTodos(key: SessionKey): Promise<Todo[]> {
    return this.#read("list the todos", key, (sql, key) => sql.todos(key));
  }

  completeTodo(key: SessionKey, id: number): Promise<Todo | null> {
    return this.#write("complete a todo", key, async (sql, key) => {
      if (!isRowId(id)) return null;
      return await sql.completeTodo(key, id, this.#stamp());
    });
  }

  acquireLease(
    key: SessionKey,
    owner: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<LeaseTake> {
    return this.#read("take the lease", key, async (sql, key) => {
      const ttl = leaseTtl(owner, ttlMs, "acquire");
      const holder = await sql.takeLease(key, owner, ttl, leaseFrom(options) ?? null, this.#now());
      return holder === owner ? { taken: true } : { taken: false, holder };
    });
  }

  renewLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean> {
    return this.#read("renew the lease", key, async (sql, key) => {
      return await sql.renewLease(key, owner, leaseTtl(owner, ttlMs, "renew"), this.#now());
    });
  }

  releaseLease(key: SessionKey, owner: string): Promise<boolean> {
    return this.#read("release the lease", key, async (sql, key) => {
      leaseTtl(owner, 1, "release"); // checks the owner
      return await sql.releaseLease(key, owner, CANCEL_MARK);
    });
  }

  cancelLease(key: SessionKey): Promise<boolean> {
    return this.#read("cancel the lease's work", key, async (sql, key) => {
      return await sql.markLease(key, CANCEL_MARK, this.#now());
    });
  }

  /**
   * A page of sessions last written before `before` (an ISO time) whose lease nobody holds: at most `limit`,
   * oldest first, starting after `after` (the last session of the previous page). A retention pass lists them
   * to delete them with {@linkcode SqlStore.deleteIdleSession}.
   */
  idleSessions(before: string, limit: number, after: IdleCursor = FIRST_IDLE): Promise<Session[]> {
    if (!Number.isInteger(limit) || limit < 1) {
      return Promise.reject(
        new RangeError(`Cannot list idle sessions: limit must be an integer >= 1, got ${limit}`),
      );
    }
    return this.#db.read(
      "list the idle sessions",
      (sql) => sql.idleSessions(before, after, limit, this.#now()),
    );
  }

  /**
   * Deletes the session, if it was still last written before `before`, with its messages, todos, pending step,
   * trace events and lease, in one transaction; resolves to whether it did. It runs under the session's lease,
   * taken for `owner` (for `ttlMs`) without waiting: a session whose lease another owner holds (a turn runs
   * on it) is left as it is (false), and a turn that asks meanwhile waits, then finds no session.
   */
  async deleteIdleSession(key: SessionKey, before: string, owner: string, ttlMs: number): Promise<boolean> {
    if (!(await this.acquireLease(key, owner, ttlMs)).taken) return false;
    try {
      return await this.#write("delete the idle session", key, async (sql, key) => {
        // Listed a moment ago, but a turn may have written to it before the lease was taken.
        const session = await sql.session(key);
        const idle = session !== null && session.updatedAt < before;
        if (idle) {
          await sql.deleteSessionTrace(key);
          await sql.deleteSession(key);
        }
        await sql.releaseLease(key, owner, CANCEL_MARK);
        return idle;
      });
    } catch (error) {
      // Not released with the transaction: free it now, or it expires by itself.
      await this.releaseLease(key, owner).catch(() => {});
      throw error;
    }
  }

  /** `work` on the checked request key, in one transaction that holds no session. */
  async #writeRequest<T>(
    action: string,
    key: RequestKey,
    work: (sql: SessionSql, key: RequestKey) => Promise<T>,
  ): Promise<T> {
    // The key stays out of the action: errors name the user only.
    const checked = validateRequestKey(key);
    return await this.#db.write(`${action} of user "${key.userId}"`, null, (sql) => work(sql, checked));
  }

  claimRequest(key: RequestKey, hash: string, options: ClaimRequestOptions = {}): Promise<RequestClaim> {
    const { runningMs = IDEMPOTENCY_RUNNING_MS } = options;
    if (typeof hash !== "string" || hash === "") {
      return Promise.reject(
        new TypeError("Cannot claim an idempotency key: the hash must be a non-empty string"),
      );
    }
    if (!(runningMs > 0)) {
      return Promise.reject(
        new RangeError(`Cannot claim an idempotency key: runningMs must be a number > 0, got ${runningMs}`),
      );
    }
    return this.#writeRequest("claim an idempotency key", key, async (sql, key) => {
      const at = this.#now().getTime();
      for (;;) {
        if (await sql.insertRequest(key, hash, at)) return { state: "new", held: { ...key, claimedAt: at } };
        const claim = await sql.request(key);
        // Released between the insert and the read: the key is free again.
        if (claim === null) continue;
        return await this.#claimHeld(sql, key, claim, hash, at, runningMs);
      }
    });
  }

  /** What a claim of `hash` at `at` finds of the held `claim`, taking it over when it counts as absent. */
  async #claimHeld(
    sql: SessionSql,
    key: RequestKey,
    claim: RequestRow,
    hash: string,
    at: number,
    runningMs: number,
  ): Promise<RequestClaim> {
    const bound = claim.state === "done" ? IDEMPOTENCY_KEEP_MS : Math.min(runningMs, IDEMPOTENCY_KEEP_MS);
    if (at - claim.createdAt >= bound) {
      await sql.retakeRequest(key, hash, at);
      return { state: "new", held: { ...key, claimedAt: at } };
    }
    if (claim.hash !== hash) return { state: "mismatch" };
    if (claim.response === null) return { state: "running" };
    return { state: "done", response: claim.response };
  }

  finishRequest(held: HeldRequest, response: StoredResponse): Promise<boolean> {
    const { status, contentType, body } = response;
    if (!Number.isInteger(status) || typeof contentType !== "string" || typeof body !== "string") {
      return Promise.reject(
        new TypeError(
          "Cannot finish a request: the response needs an integer status, a content type and a body",
        ),
      );
    }
    return this.#writeRequest("finish a request", held, (sql) => sql.finishRequest(held, response));
  }

  releaseRequest(held: HeldRequest): Promise<boolean> {
    return this.#writeRequest("release an idempotency key", held, (sql) => sql.deleteRequest(held));
  }

  /**
   * Deletes at most `limit` claims of idempotency keys older than {@linkcode IDEMPOTENCY_KEEP_MS} at `now`
   * (ms; the retention pass's clock), which count as absent already; resolves to how many.
   */
  pruneRequests(now: number, limit: number): Promise<number> {
    if (!Number.isInteger(limit) || limit < 1) {
      return Promise.reject(
        new RangeError(`Cannot delete old idempotency keys: limit must be an integer >= 1, got ${limit}`),
      );
    }
    return this.#db.write(
      "delete old idempotency keys",
      null,
      (sql) => sql.pruneRequests(now - IDEMPOTENCY_KEEP_MS, limit),
    );
  }

  saveResponse(key: SessionKey, id: string, body: string): Promise<boolean> {
    if (typeof body !== "string") {
      return Promise.reject(new TypeError("Cannot keep a response: its body must be a string of JSON"));
    }
    return this.#write("keep a response", key, async (sql, key) => {
      validateId(id, "response id");
      if (await sql.session(key) === null) return false;
      await sql.upsertResponse(key, id, body, this.#stamp());
      return true;
    });
  }

  response(userId: string, id: string): Promise<KeptResponse | null> {
    return this.#readUser("read a response", userId, (sql, userId) => {
      validateId(id, "response id");
      return sql.response(userId, id);
    });
  }

  ping(): Promise<boolean> {
    return this.#db.ping();
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}
