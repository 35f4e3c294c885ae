/**
 * The session store's contract: sessions, their messages and todos, per user, and each user's memory across
 * their sessions. Every method is async, so a
 * store may live in-process (SQLite) or across the network (PostgreSQL).
 * @module
 */
import { SessionError } from "../errors.ts";
import {
  isValidId,
  type ProviderState,
  type StoredMessage,
  type ToolCall,
  type UsageEntry,
} from "../types.ts";

/** Which session: ids are per user, so two users' sessions of the same id never see each other. */
export interface SessionKey {
  userId: string;
  sessionId: string;
}

/**
 * The session as one string, for maps and queues of this process: per user, like the session. Unique, since
 * NUL cannot occur in an id ({@linkcode validateId}).
 */
export function sessionName(key: SessionKey): string {
  return `${key.userId}\u0000${key.sessionId}`;
}

/**
 * What the provider counted of the session's last request: `tokens` prompt tokens for the request whose last
 * message was `through` (null: none) with the fixed parts and summary of fingerprint `fixed`. The next request's
 * estimate is that count plus an estimate of the messages added since.
 */
export interface Calibration {
  tokens: number;
  through: string | null;
  fixed: string;
}

/** A session. `summary` is the JSON text compaction wrote, or null. */
export interface Session {
  id: string;
  userId: string;
  summary: string | null;
  turnCount: number;
  /** User turns folded into the summary: `turnCount` = this + the stored user messages. */
  compactedTurns: number;
  /** The provider's count of the last request, or null (none reported yet). */
  calibration: Calibration | null;
  /** Its title: given by its user, else its first question's (`titleFrom`); null before its first question. */
  title: string | null;
  createdAt: string;
  updatedAt: string;
}

/** Options of {@linkcode LeaseStore.acquireLease}. */
export interface AcquireLeaseOptions {
  /** An owner whose lease may be taken before it expires (its process is gone). @default {undefined} */
  from?: string;
}

/** What {@linkcode LeaseStore.acquireLease} did: took the lease, or found it held by `holder`. */
export type LeaseTake = { taken: true } | { taken: false; holder: string };

/**
 * What {@linkcode LeaseStore.cancelLease} appends to a lease's owner: the holder, asked to cancel its work,
 * finds its lease under `owner + CANCEL_MARK` at its next renewal, and takes it back under `owner`.
 */
export const CANCEL_MARK = "!cancel";

/** The host part of an owner when this process may not read its host name: it judges no other process. */
export const UNKNOWN_HOST = "host";

/**
 * This process's id among the holders of leases, `host:pid:start:random`: its host name (when the permission
 * allows, else `host`), its pid, when it started (ms since the epoch) and a random part, so a restarted
 * process with the same pid is someone else.
 */
export function processOwner(): string {
  const host = Deno.permissions.querySync({ name: "sys", kind: "hostname" }).state === "granted"
    ? Deno.hostname().replaceAll(":", "_")
    : UNKNOWN_HOST;
  const start = Math.round(performance.timeOrigin);
  return `${host}:${Deno.pid}:${start}:${crypto.randomUUID().slice(0, 8)}`;
}

/** A session's todo. */
export interface Todo {
  id: number;
  text: string;
  completed: boolean;
  createdAt: string;
  completedAt: string | null;
}

/** One item of a user's memory: a fact or goal kept across the user's sessions. */
export interface MemoryItem {
  id: number;
  text: string;
  /** The session that first wrote it, or null (written outside a session). */
  sourceSession: string | null;
  firstSeen: string;
  /** When it was last written again (a compaction or `remember` of the same text). */
  lastSeen: string;
  /** When it was last written or recalled: the least recently used item leaves first. */
  lastUsed: string;
  /** How many turns recalled it. */
  useCount: number;
}

/** An item recall found, with its relevance (higher is more relevant; the scale is the backend's). */
export interface RecalledItem {
  id: number;
  text: string;
  score: number;
}

/** Items to merge into a user's memory, and how many the user may keep. */
export interface MemoryWrite {
  /** Texts, each cleaned (`cleanMemoryText`); one equal to a kept item (case and spaces aside) folds into it. */
  items: readonly string[];
  /** At most this many items per user (AGENT_USER_MEMORY_ITEMS); the least recently used leave first. */
  limit: number;
}

/** What a memory write did: the ids of the written items (new or folded), how many were new, how many left. */
export interface MemoryWritten {
  ids: number[];
  added: number;
  evicted: number;
}

/**
 * A step that waits for the user's approval: the assistant message with its tool calls, none of them run yet.
 * It is kept apart from the messages, so the history never holds a tool call without its result.
 */
export interface PendingStep {
  runId: string;
  /** The turn's number. */
  turn: number;
  /** The loop step whose reply made the calls. */
  step: number;
  /** The number of the run's next message id (`<runId>:<seq>`). */
  seq: number;
  content: string | null;
  toolCalls: ToolCall[];
  /** Ids of the calls that wait for the user's decision. */
  asked: string[];
  createdAt: string;
  /** What the provider needs back with the assistant message once it is stored. */
  providerState?: ProviderState;
}

/** Options of the writes that can count model calls' tokens with what the calls produced. */
export interface UsageOptions {
  /** Model calls' tokens to add to the user's day and the session's totals in the same transaction. @default {[]} */
  usage?: readonly UsageEntry[];
}

/** Options of {@linkcode UsageStore.userUsage}: the days, inclusive, as `YYYY-MM-DD`. */
export interface UsageRange {
  /** @default {the first day} */
  from?: string;
  /** @default {the last day} */
  to?: string;
}

/** A user's sessions and their transcripts: messages, the summary compaction leaves, the step that waits for approval. Every method validates its key (`SessionError` for a malformed id). */
export interface TranscriptStore {
  /** The session, or null when the user has none of that id. */
  get(key: SessionKey): Promise<Session | null>;
  /** The user's session, created if new. */
  getOrCreate(key: SessionKey): Promise<Session>;
  /** The user's sessions, most recently updated first. */
  listSessions(userId: string): Promise<Session[]>;
  /**
   * Gives the session `title` (`givenTitle`: a `TypeError` or `RangeError` for a bad one), kept over every
   * later message; a blank title names it from its first stored question again (null without one). Resolves
   * to the session, or null when the user has none of that id.
   */
  renameSession(key: SessionKey, title: string): Promise<Session | null>;
  /** The session's messages, oldest first: a new array of frozen messages. */
  messages(key: SessionKey): Promise<StoredMessage[]>;
  /**
   * Appends messages and resolves to how many were new. Idempotent: an id already stored is skipped. Each
   * new `user` message adds one to `turnCount`, and a session without a title is named from its first stored
   * question (`titleFrom`); `calibration` is stored with them, and a recall of the user's
   * items `memoryUsed` counted (as {@linkcode MemoryStore.useMemory}), in the same transaction.
   * `TypeError` for a field of the wrong type.
   */
  append(
    key: SessionKey,
    messages: readonly StoredMessage[],
    options?: UsageOptions & { calibration?: Calibration; memoryUsed?: readonly number[] },
  ): Promise<number>;
  /**
   * Stores `summary` and deletes exactly `cutIds` (`turns` user turns), and with `memory` merges its items into
   * the user's memory, in one transaction; rejects, changing nothing, if one is missing or, with `previous`, if
   * the stored summary is no longer that text (null: none). Resolves to what the memory write did (null
   * without one).
   */
  applyCompaction(
    key: SessionKey,
    summary: string,
    cutIds: readonly string[],
    turns: number,
    options?: { previous?: string | null; memory?: MemoryWrite },
  ): Promise<MemoryWritten | null>;
  /** Deletes those of `ids` that are stored (taking their user turns off `turnCount`); resolves to how many. */
  discardMessages(key: SessionKey, ids: readonly string[]): Promise<number>;
  /** Stores the session's pending step; rejects, changing nothing, if the session already has one. */
  savePending(key: SessionKey, step: PendingStep, options?: UsageOptions): Promise<void>;
  /** The session's pending step, or null. */
  pendingStep(key: SessionKey): Promise<PendingStep | null>;
  /**
   * In one transaction: deletes the pending step of `runId` and appends `messages` (as `append`). Resolves
   * to false, storing nothing, when the session has no pending step of that run (resolved meanwhile).
   */
  resolvePending(key: SessionKey, runId: string, messages: readonly StoredMessage[]): Promise<boolean>;
  /** Deletes the session with its messages, todos, summary and pending step; true if it existed. */
  deleteSession(key: SessionKey): Promise<boolean>;
}

/** The todos of a session (the `todo` tool). Every method validates its key (`SessionError` for a malformed id). */
export interface TodoStore {
  /**
   * Adds an open todo to the session. With `callId` (the tool call that adds it), a todo that call already
   * added is returned instead and nothing is added: a call run again adds nothing.
   */
  addTodo(key: SessionKey, text: string, options?: { callId?: string }): Promise<Todo>;
  /** The session's todos, in the order they were added. */
  listTodos(key: SessionKey): Promise<Todo[]>;
  /** Marks the todo done (keeping its first completion time); null when the session has no such todo. */
  completeTodo(key: SessionKey, id: number): Promise<Todo | null>;
}

/** What the runtime remembers of a user across sessions. Every method validates its key (`SessionError` for a malformed id). */
export interface MemoryStore {
  /**
   * Merges `write.items` into the user's memory in one transaction (a folded item keeps its first spelling and
   * source, and is seen again now), then keeps at most `write.limit` items. `sessionId` is the new items'
   * source. `RangeError` for a limit below 1.
   */
  remember(
    userId: string,
    write: MemoryWrite,
    options?: { sessionId?: string | null },
  ): Promise<MemoryWritten>;
  /**
   * At most `limit` of the user's items matching the words of `text` (`recallTerms`), most relevant first (ties:
   * lower id first); never another user's. Reads only.
   */
  recallMemory(userId: string, text: string, limit: number): Promise<RecalledItem[]>;
  /** Counts a recall of the user's items `ids`: their use count goes up and they are used now. */
  useMemory(userId: string, ids: readonly number[]): Promise<void>;
  /** The user's memory, oldest item first. */
  listMemory(userId: string): Promise<MemoryItem[]>;
  /** Deletes the user's item `id`, or with no id every item of the user; resolves to how many went. */
  forgetMemory(userId: string, id?: number): Promise<number>;
}

/** Model calls' tokens, by user, day and model, and by session. Every method validates its key (`SessionError` for a malformed id). */
export interface UsageStore {
  /**
   * Adds model calls' tokens to the user's days and, if the session exists, to its totals, in one transaction
   * (for calls whose tokens no other write carried). Usage is never taken back: a discard leaves it.
   */
  recordUsage(key: SessionKey, usage: readonly UsageEntry[]): Promise<void>;
  /** The user's tokens by day and model, oldest day first, then by model; days without calls are left out. */
  userUsage(userId: string, range?: UsageRange): Promise<UsageEntry[]>;
  /** The session's tokens by model (`day` is its last day of use); empty when it has none or does not exist. */
  sessionUsage(key: SessionKey): Promise<UsageEntry[]>;
}

/** The session leases that let processes share a database (`src/session/leases.ts`). Every method validates its key (`SessionError` for a malformed id). */
export interface LeaseStore {
  /**
   * Takes the session's lease for `owner` until now + ttlMs when it is free, expired or already `owner`'s, or
   * held by `options.from` (a holder the caller knows is gone; a compare-and-set on exactly that owner, so of
   * two callers naming it only the first takes it). Atomic across processes. When another owner holds it,
   * marks it wanted, so that owner learns at release that someone waits, and answers who holds it.
   */
  acquireLease(
    key: SessionKey,
    owner: string,
    ttlMs: number,
    options?: AcquireLeaseOptions,
  ): Promise<LeaseTake>;
  /** Extends the lease when `owner` still holds it; false when it was lost (expired and taken). */
  renewLease(key: SessionKey, owner: string, ttlMs: number): Promise<boolean>;
  /**
   * Frees the lease if `owner` holds it (marked to cancel or not); true when another owner asked for it
   * meanwhile (it waits).
   */
  releaseLease(key: SessionKey, owner: string): Promise<boolean>;
  /**
   * Asks the holder of the session's live lease to cancel its work: its owner gets {@linkcode CANCEL_MARK}
   * appended (once), its expiry and `wanted` unchanged, so it stays the holder's. Atomic across processes.
   * True when a live lease now carries the mark; false when none is held.
   */
  cancelLease(key: SessionKey): Promise<boolean>;
}

/** Which request of a user a client marks as one (`Idempotency-Key`): its repeats get its result. */
export interface RequestKey {
  userId: string;
  /** The client's key: 1-255 visible ASCII characters ({@linkcode IDEMPOTENCY_KEY}). */
  key: string;
}

/** What a key accepts: 1-255 visible ASCII characters (no space, no control character). */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** How long a request's result answers its repeats, from the first request's claim: 24 h. */
export const IDEMPOTENCY_KEEP_MS = 24 * 60 * 60 * 1000;

/**
 * How long a claim still running holds its key by default: 15 min. Past it the claim counts as dead (its
 * process gone before it finished or released it), and the key is free again.
 */
export const IDEMPOTENCY_RUNNING_MS = 15 * 60 * 1000;

/** A response kept for a request's repeats: its status, content type and whole body. */
export interface StoredResponse {
  status: number;
  contentType: string;
  body: string;
}

/**
 * What {@linkcode IdempotencyStore.claimRequest} found: the key was free and is now the caller's (`new`); a
 * request of the same body holds it and still runs (`running`) or has finished (`done`, with its response); a
 * request of another body holds it (`mismatch`).
 */
export type RequestClaim =
  | { state: "new"; held: HeldRequest }
  | { state: "running" }
  | { state: "done"; response: StoredResponse }
  | { state: "mismatch" };

/**
 * A claim its caller holds: the key, and when it was claimed (ms), which tells this claim from a later one
 * that took the key over: only the holder of the claim still there may finish or free it.
 */
export interface HeldRequest extends RequestKey {
  claimedAt: number;
}

/** Options of {@linkcode IdempotencyStore.claimRequest}. */
export interface ClaimRequestOptions {
  /**
   * How long a running claim holds the key, in milliseconds: an older one is taken over as dead.
   * @default {IDEMPOTENCY_RUNNING_MS}
   */
  runningMs?: number;
}

/**
 * The requests a client marked with an `Idempotency-Key`, per user, each kept {@linkcode IDEMPOTENCY_KEEP_MS}
 * from its claim; an older one counts as absent. Every method validates its key (`SessionError` for a
 * malformed user id or key).
 */
export interface IdempotencyStore {
  /**
   * Claims `key` for a request whose hash (of what it asks) is `hash`, atomically across processes: of two
   * claims at once only one is `new`. A claim older than its bound (kept or running, see
   * {@linkcode ClaimRequestOptions.runningMs}) counts as absent and is taken over.
   */
  claimRequest(key: RequestKey, hash: string, options?: ClaimRequestOptions): Promise<RequestClaim>;
  /**
   * Stores the response of the running claim `held`; false when it is no longer there (released, or taken
   * over as dead by a later claim, whose result it never overwrites).
   */
  finishRequest(held: HeldRequest, response: StoredResponse): Promise<boolean>;
  /**
   * Frees the key of claim `held` (its request did no work a repeat must not do again); false when that claim
   * is no longer there (a later claim that took the key over keeps it).
   */
  releaseRequest(held: HeldRequest): Promise<boolean>;
}

/** A response of `POST /v1/responses` as kept: whose, on which session, its body, when it was made. */
export interface KeptResponse {
  /** `resp_…`, unique per user. */
  id: string;
  userId: string;
  /** The session its turn ran on: `previous_response_id` continues it. */
  sessionId: string;
  /** The response object as JSON. */
  body: string;
  /** ISO time. */
  createdAt: string;
}

/**
 * The responses of `POST /v1/responses` kept with the session their turn ran on (`store: true`), for
 * `GET /v1/responses/{id}` and `previous_response_id`; each goes with its session. Every method validates its
 * ids (`SessionError`).
 */
export interface ResponseStore {
  /**
   * Keeps response `id` (its body JSON) of the session `key`; a second save of the same id replaces the body.
   * False when the session is not stored (deleted since its turn): nothing is kept.
   */
  saveResponse(key: SessionKey, id: string, body: string): Promise<boolean>;
  /** The user's response `id`, or null when the user has none of that id (another user's never is). */
  response(userId: string, id: string): Promise<KeptResponse | null>;
}

/** The database itself. Every method validates its key (`SessionError` for a malformed id). */
export interface HealthStore {
  /** True when the database answers; never rejects. */
  ping(): Promise<boolean>;
  /** Releases the database; the store is unusable afterwards. */
  close(): Promise<void>;
}

/**
 * Where sessions live: every role in one. Every write is one transaction: it happens whole or not at all.
 * A consumer takes only the role it uses; `SqlStore` implements them all over SQLite and PostgreSQL.
 */
export interface SessionStore
  extends
    TranscriptStore,
    TodoStore,
    MemoryStore,
    UsageStore,
    LeaseStore,
    IdempotencyStore,
    ResponseStore,
    HealthStore {}

/** `id` if it is 1–128 characters of `[A-Za-z0-9._:-]`, else a `SessionError`; `what` names it in the message. */
export function validateId(id: unknown, what = "session id"): string {
  if (isValidId(id)) return id;
  const shown = typeof id === "string"
    ? JSON.stringify(id.length > 40 ? id.slice(0, 40) + "…" : id)
    : typeof id;
  throw new SessionError(
    `Invalid ${what} ${shown}: expected 1-128 characters of letters, digits and . _ : -`,
    "invalid_id",
  );
}

/**
 * The request key, its user id checked with {@linkcode validateId} and its key against
 * {@linkcode IDEMPOTENCY_KEY} (a `SessionError`, whose message never shows the key).
 */
export function validateRequestKey(key: RequestKey): RequestKey {
  validateId(key.userId, "user id");
  if (typeof key.key === "string" && IDEMPOTENCY_KEY.test(key.key)) return key;
  throw new SessionError(
    "Invalid idempotency key: expected 1-255 visible ASCII characters",
    "invalid_id",
  );
}

/** The key, both ids checked with {@linkcode validateId}. */
export function validateKey(key: SessionKey): SessionKey {
  validateId(key.userId, "user id");
  validateId(key.sessionId);
  return key;
}

/**
 * A lease operation's `ttlMs`, rounded up to whole milliseconds, once checked with its owner: a non-empty owner
 * and a finite ttl > 0 (`TypeError`, `RangeError`); `action` names the operation in the message.
 */
export function leaseTtl(owner: unknown, ttlMs: number, action: string): number {
  if (typeof owner !== "string" || owner === "") {
    throw new TypeError(`Cannot ${action} a session lease: the owner must be a non-empty string`);
  }
  if (!(ttlMs > 0) || !Number.isFinite(ttlMs)) {
    throw new RangeError(`Cannot ${action} a session lease: ttlMs must be a finite number > 0, got ${ttlMs}`);
  }
  return Math.ceil(ttlMs);
}

/** `options.from` once checked: a non-empty string or undefined (`TypeError`). */
export function leaseFrom(options: AcquireLeaseOptions | undefined): string | undefined {
  const from = options?.from;
  if (from === undefined || (typeof from === "string" && from !== "")) return from;
  throw new TypeError("Cannot acquire a session lease: options.from must be a non-empty string when given");
}

/**
 * The schema version both stores write (SQLite in `PRAGMA user_version`, PostgreSQL in `agent_schema`): 1
 * sessions keyed by id alone (SQLite only), 2 sessions keyed by user and id, with messages and todos, 3 the
 * step waiting for approval (`pending_steps`), 4 session leases, 5 trace events, 6 the tool call that added
 * each todo (`todos.call_id`), 7 the provider's count of the last request (`sessions.calibration`), 8 tokens
 * counted per user, day and model (`usage_daily`) and per session (`session_usage`), 9 the user's memory across
 * sessions (`user_memory`, with its full-text index), 10 the session's title (`sessions.title`), 11 what a provider needs back of an assistant message
 * (`provider_state`) and the input tokens read from its cache (`cached_tokens`), 12 the input tokens written to
 * its cache (`cache_write_tokens`), 13 the requests a client marked with an `Idempotency-Key`, with their
 * results (`idempotency_keys`), 14 the responses of `POST /v1/responses`, kept with their session
 * (`responses`).
 */
export const SCHEMA_VERSION = 14;

/** One migration of a dialect's list: it brings the schema from version `from` to `to` by `run`. */
export interface MigrationStep<Run> {
  from: number;
  to: number;
  run: Run;
}

/**
 * The migrations that bring a schema at version `found` to `target`, in order: from each version the step
 * that goes furthest without passing `target`. Throws, so that nothing is changed, for a version newer than
 * this code's or one the list has no step from.
 */
export function migrationPath<Run>(
  found: number,
  steps: readonly MigrationStep<Run>[],
  target = SCHEMA_VERSION,
): Run[] {
  if (found > SCHEMA_VERSION) {
    throw new Error(
      `Cannot open the session database: its schema version is ${found}, this program knows ${SCHEMA_VERSION}`,
    );
  }
  const path: Run[] = [];
  for (let at = found; at < target;) {
    const next = steps.filter((s) => s.from === at && s.to <= target).sort((a, b) => b.to - a.to)[0];
    if (next === undefined) {
      throw new Error(`Cannot open the session database: unknown schema version ${at}`);
    }
    path.push(next.run);
    at = next.to;
  }
  return path;
}
