/**
 * How stored rows become values and messages become rows: the same for SQLite and PostgreSQL, whose columns
 * are named alike and whose free text comes back as UTF-8 bytes (and goes to PostgreSQL as them). Private to
 * `sqlite.ts` and `postgres.ts`.
 * @module
 */
import type { ProviderState, Role, StoredMessage, ToolCall, UsageEntry } from "../types.ts";
import { deepFreeze } from "../_json.ts";
import type { KeptResponse, MemoryItem, PendingStep, Session, StoredResponse, Todo } from "./store.ts";

export type Row = Record<string, unknown>;

// ignoreBOM: a text that starts with U+FEFF keeps it.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
/**
 * A text column read as bytes (SQLite's `CAST(… AS BLOB)`, PostgreSQL's `bytea`), or already as a string
 * (PostgreSQL's `text`).
 */
export function text(value: unknown): string {
  return typeof value === "string" ? value : decoder.decode(value as Uint8Array);
}

const encoder = new TextEncoder();
/** Free text as PostgreSQL's `bytea` columns take it; null stays null. */
export function bytes(value: string | null): Uint8Array | null {
  return value === null ? null : encoder.encode(value);
}

export function toSession(row: Row): Session {
  return {
    id: row.id as string,
    userId: row.user_id as string,
    summary: row.summary as string | null,
    turnCount: row.turn_count as number,
    compactedTurns: row.compacted_turns as number,
    calibration: typeof row.calibration === "string" ? JSON.parse(row.calibration) : null,
    title: typeof row.title === "string" ? row.title : null,
    createdAt: row.created_at as string,
    updatedAt: row.updated_at as string,
  };
}

export function toMessage(row: Row): StoredMessage {
  const content = row.content === null ? null : text(row.content);
  const toolCallId = row.tool_call_id === null ? null : text(row.tool_call_id);
  const fields = [
    text(row.id),
    row.role as string,
    content,
    row.tool_calls as string | null,
    toolCallId,
  ] as const;
  return messageOf([...fields, text(row.created_at), row.provider_state as string | null]);
}

/**
 * The message a read of `row` (as inserted) returns, or null when one of its texts is not well-formed UTF-16:
 * stored as UTF-8, a lone surrogate comes back as U+FFFD.
 */
export function insertedMessage(row: MessageRow): StoredMessage | null {
  const [id, , content, , toolCallId, createdAt] = row;
  const texts = [id, content, toolCallId, createdAt];
  return texts.every((value) => value === null || value.isWellFormed()) ? messageOf(row) : null;
}

/** The message of a row's values, its texts decoded: frozen, as the store's cache hands it to every turn. */
function messageOf(row: MessageRow): StoredMessage {
  const [id, role, content, toolCalls, toolCallId, createdAt, state] = row;
  const message: StoredMessage = { id, role: role as Role, content, createdAt };
  if (toolCalls !== null) message.toolCalls = JSON.parse(toolCalls) as ToolCall[];
  if (toolCallId !== null) message.toolCallId = toolCallId;
  if (typeof state === "string") message.providerState = deepFreeze(JSON.parse(state) as ProviderState);
  if (message.toolCalls !== undefined) {
    Object.freeze(message.toolCalls).forEach((call) => Object.freeze(call));
  }
  return Object.freeze(message);
}

/** A row's `provider_state` (JSON), frozen all the way: it is sent back as is. */
function providerState(row: Row): ProviderState | undefined {
  const json = row.provider_state;
  return typeof json === "string" ? deepFreeze(JSON.parse(json) as ProviderState) : undefined;
}

export function toPending(row: Row): PendingStep {
  const state = providerState(row);
  return {
    ...(state === undefined ? {} : { providerState: state }),
    runId: row.run_id as string,
    turn: row.turn as number,
    step: row.step as number,
    seq: row.seq as number,
    content: row.content === null ? null : text(row.content),
    toolCalls: JSON.parse(row.tool_calls as string) as ToolCall[],
    asked: JSON.parse(row.asked as string) as string[],
    createdAt: row.created_at as string,
  };
}

/** A row of token counts (PostgreSQL's `bigint` sums come back as strings or bigints). */
export function toUsage(row: Row): UsageEntry {
  return {
    day: row.day as string,
    model: row.model as string,
    promptTokens: Number(row.prompt_tokens),
    cachedTokens: Number(row.cached_tokens),
    cacheWriteTokens: Number(row.cache_write_tokens),
    completionTokens: Number(row.completion_tokens),
    calls: Number(row.calls),
    estimatedCalls: Number(row.estimated_calls),
  };
}

export function toTodo(row: Row): Todo {
  return {
    id: row.id as number,
    text: text(row.text),
    completed: row.completed === 1,
    createdAt: row.created_at as string,
    completedAt: row.completed_at as string | null,
  };
}

/** A row of `user_memory` (PostgreSQL's counts may come back as strings). */
export function toMemoryItem(row: Row): MemoryItem {
  return {
    id: Number(row.id),
    // SQLite's comes as bytes (read so, whole); PostgreSQL's `text` as a string.
    text: text(row.text),
    sourceSession: row.source_session as string | null,
    firstSeen: row.first_seen as string,
    lastSeen: row.last_seen as string,
    lastUsed: row.last_used as string,
    useCount: Number(row.use_count),
  };
}

/** `nullable`: null allowed too; `optional`: null or absent. */
function requireText(index: number, field: string, value: unknown, allow?: "nullable" | "optional"): void {
  if (typeof value === "string" || (allow !== undefined && value === null)) return;
  if (allow === "optional" && value === undefined) return;
  const expected = allow === undefined
    ? "a string"
    : allow === "nullable"
    ? "a string or null"
    : "a string, null or absent";
  const got = value === null ? "null" : typeof value;
  throw new TypeError(`Cannot append message ${index}: "${field}" must be ${expected}, got ${got}`);
}

/**
 * A message as its insert's parameters: id, role, content, tool calls (JSON), tool call id, creation time,
 * provider state (JSON).
 */
export type MessageRow = readonly [
  string,
  string,
  string | null,
  string | null,
  string | null,
  string,
  string | null,
];

/** A provider state as its column holds it (JSON), or null. */
export function stateColumn(state: ProviderState | undefined): string | null {
  return state === undefined ? null : JSON.stringify(state);
}

/** The message as a row; a `TypeError` for a field a database would otherwise store converted. */
export function toRow(m: StoredMessage, index: number): MessageRow {
  requireText(index, "id", m.id);
  requireText(index, "role", m.role);
  requireText(index, "content", m.content, "nullable");
  requireText(index, "createdAt", m.createdAt);
  requireText(index, "toolCallId", m.toolCallId, "optional");
  const calls = m.toolCalls ?? [];
  if (!Array.isArray(calls)) {
    throw new TypeError(`Cannot append message ${index}: "toolCalls" must be an array, got ${typeof calls}`);
  }
  // An empty list is stored as none.
  const toolCalls = calls.length > 0 ? JSON.stringify(calls) : null;
  if (
    m.providerState !== undefined && (m.role !== "assistant" || typeof m.providerState?.origin !== "string")
  ) {
    throw new TypeError(
      `Cannot append message ${index}: "providerState" needs an assistant message and an origin`,
    );
  }
  return [
    m.id,
    m.role,
    m.content,
    toolCalls,
    m.toolCallId ?? null,
    m.createdAt,
    stateColumn(m.providerState),
  ];
}

/** A claim of an idempotency key as stored: its request's hash, its state, when it was made, its response. */
export interface RequestRow {
  hash: string;
  state: "running" | "done";
  /** Milliseconds since the epoch. */
  createdAt: number;
  /** Null while it runs. */
  response: StoredResponse | null;
}

/** A row of `idempotency_keys` (its body as text, or as bytes from SQLite's `CAST(… AS BLOB)`). */
export function toRequestRow(row: Row): RequestRow {
  const done = row.state === "done";
  return {
    hash: row.request_hash as string,
    state: done ? "done" : "running",
    createdAt: Number(row.created_at),
    response: done
      ? {
        status: Number(row.status),
        contentType: row.content_type as string,
        body: text(row.body),
      }
      : null,
  };
}

/** A row of `responses` (its body as text, or as bytes from SQLite's `CAST(… AS BLOB)`). */
export function toKeptResponse(row: Row): KeptResponse {
  return {
    id: row.id as string,
    userId: row.user_id as string,
    sessionId: row.session_id as string,
    body: text(row.body),
    createdAt: row.created_at as string,
  };
}
