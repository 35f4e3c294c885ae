/**
 * The store's rows: how a row becomes a value and a message becomes a row. Private to `store.ts`, which
 * re-exports the public types (the schema is in `_store_schema.ts`).
 * @module
 */
import { freezeMessage } from "./context.ts";
import type { Role, StoredMessage, ToolCall } from "./types.ts";

/** A session row. `summary` is the raw JSON text written by compaction, or null. */
export interface Session {
  id: string;
  userId: string;
  summary: string | null;
  turnCount: number;
  /** User turns folded into the summary by compaction: `turnCount` = this + the stored user messages. */
  compactedTurns: number;
  createdAt: string;
  updatedAt: string;
}

/** A todo row. */
export interface Todo {
  id: number;
  text: string;
  completed: boolean;
  createdAt: string;
  completedAt: string | null;
}

export interface SessionRow {
  id: string;
  user_id: string;
  summary: string | null;
  turn_count: number;
  compacted_turns: number;
  created_at: string;
  updated_at: string;
}

/**
 * The columns a message is read back with. Free text comes back as bytes: `node:sqlite` cuts a TEXT value at
 * its first NUL character, while the bytes hold all of it.
 */
export const MESSAGE_COLUMNS =
  "CAST(id AS BLOB) AS id, role, CAST(content AS BLOB) AS content, tool_calls, " +
  "CAST(tool_call_id AS BLOB) AS tool_call_id, CAST(created_at AS BLOB) AS created_at";
/** The columns a todo is read back with; see {@linkcode MESSAGE_COLUMNS}. */
export const TODO_COLUMNS = "id, CAST(text AS BLOB) AS text, completed, created_at, completed_at";

export interface MessageRow {
  id: Uint8Array;
  role: Role;
  content: Uint8Array | null;
  tool_calls: string | null;
  tool_call_id: Uint8Array | null;
  created_at: Uint8Array;
}

export interface TodoRow {
  id: number;
  text: Uint8Array;
  completed: number;
  created_at: string;
  completed_at: string | null;
}

export function toSession(row: SessionRow): Session {
  return {
    id: row.id,
    userId: row.user_id,
    summary: row.summary,
    turnCount: row.turn_count,
    compactedTurns: row.compacted_turns,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

// ignoreBOM: a text that starts with U+FEFF keeps it.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

function text(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

/** A message row read with {@linkcode MESSAGE_COLUMNS}, frozen (the store's cache shares it). */
export function toMessage(row: MessageRow): StoredMessage {
  const message: StoredMessage = {
    id: text(row.id),
    role: row.role,
    content: row.content === null ? null : text(row.content),
    createdAt: text(row.created_at),
  };
  if (row.tool_calls !== null) message.toolCalls = JSON.parse(row.tool_calls) as ToolCall[];
  if (row.tool_call_id !== null) message.toolCallId = text(row.tool_call_id);
  return freezeMessage(message);
}

/** A message about to be inserted, as {@linkcode toMessage} will read it back, and its tool_calls column. */
export interface MessageToStore {
  /** Frozen. */
  message: StoredMessage;
  /** The tool calls' JSON, or null when there are none (an empty list is not stored). */
  toolCalls: string | null;
}

/** `nullable`: null allowed too; `optional`: null or absent. */
function requireText(index: number, field: string, value: unknown, allow?: "nullable" | "optional"): void {
  if (typeof value === "string") return;
  if (allow !== undefined && value === null) return;
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
 * The message `m` (the `index`-th of its save) exactly as reading its row back will return it, without
 * reading it: SQLite keeps a string as UTF-8, where a lone surrogate becomes U+FFFD (`toWellFormed`), and
 * tool calls come back through their JSON. Only the stored fields are kept. `TypeError` for a field of the
 * wrong type, which SQLite would otherwise store converted.
 */
export function toStore(m: StoredMessage, index: number): MessageToStore {
  requireText(index, "id", m.id);
  requireText(index, "role", m.role);
  requireText(index, "content", m.content, "nullable");
  requireText(index, "createdAt", m.createdAt);
  requireText(index, "toolCallId", m.toolCallId, "optional");
  // Null or absent: no calls, as an empty list is.
  const calls = m.toolCalls ?? [];
  if (!Array.isArray(calls)) {
    throw new TypeError(`Cannot append message ${index}: "toolCalls" must be an array, got ${typeof calls}`);
  }
  const toolCalls = calls.length > 0 ? JSON.stringify(calls) : null;
  const message: StoredMessage = {
    id: m.id.toWellFormed(),
    role: m.role,
    content: m.content === null ? null : m.content.toWellFormed(),
    createdAt: m.createdAt.toWellFormed(),
  };
  if (toolCalls !== null) message.toolCalls = JSON.parse(toolCalls) as ToolCall[];
  if (typeof m.toolCallId === "string") message.toolCallId = m.toolCallId.toWellFormed();
  return { message: freezeMessage(message), toolCalls };
}

export function toTodo(row: TodoRow): Todo {
  return {
    id: row.id,
    text: text(row.text),
    completed: row.completed === 1,
    createdAt: row.created_at,
    completedAt: row.completed_at,
  };
}
