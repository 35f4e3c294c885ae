/** The crash test's invariant checker: what must hold of a database and a trace after any kill. @module */
import { existsSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { MAX_SUMMARY_ITEMS, parseSummary, SUMMARY_FIELDS } from "../src/memory/summary.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { SessionKey, SessionStore } from "../src/store/store.ts";
import { readTrace } from "../src/trace/trace.ts";
import { RUN_EVENT_NAMES } from "../src/events.ts";
import { type StoredMessage } from "../src/types.ts";
import { isRecord } from "../src/_json.ts";

const EVENT_NAMES = new Set<string>(RUN_EVENT_NAMES);
const SUMMARY_KEYS = new Set<string>([...SUMMARY_FIELDS, "updated_at"]);

/** `text` on one line, cut to `max` characters. */
export function clip(text: string, max = 120): string {
  return JSON.stringify(text.length > max ? `${text.slice(0, max)}…` : text);
}

/** Why a trace line is not an event with the required fields, or null when it is one. */
function eventProblem(line: string): string | null {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return "is not JSON (a torn or glued line)";
  }
  if (!isRecord(value)) return "is not a JSON object";
  const bad: string[] = [];
  if (typeof value.ts !== "string" || Number.isNaN(Date.parse(value.ts))) bad.push("ts");
  if (typeof value.session_id !== "string") bad.push("session_id");
  if (typeof value.user_id !== "string") bad.push("user_id");
  if (typeof value.run_id !== "string") bad.push("run_id");
  if (!Number.isInteger(value.turn)) bad.push("turn");
  if (typeof value.event !== "string" || !EVENT_NAMES.has(value.event)) bad.push("event");
  if (value.step !== null && !Number.isInteger(value.step)) bad.push("step");
  if (!isRecord(value.data)) bad.push("data");
  return bad.length > 0 ? `is not an event (bad ${bad.join(", ")})` : null;
}

function checkToolPairs(sessionId: string, messages: readonly StoredMessage[], out: string[]): void {
  const at = `session ${sessionId}:`;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === "tool") {
      out.push(`${at} tool message ${m.id} (call ${m.toolCallId}) has no assistant call before it`);
      continue;
    }
    if (m.role !== "assistant" || !m.toolCalls?.length) continue;
    const ids = m.toolCalls.map((call) => call.id);
    let j = i + 1;
    while (j < messages.length && messages[j].role === "tool") j++;
    const results = messages.slice(i + 1, j);
    // The last step's calls may lack results: left running by the killed process, resolved before the next
    // model call. Anywhere else a call without its result would reach the model.
    const last = j === messages.length;
    for (const id of new Set(ids)) {
      const count = results.filter((r) => r.toolCallId === id).length;
      const calls = ids.filter((x) => x === id).length;
      if ((count !== 1 && !(last && count === 0)) || calls !== 1) {
        out.push(`${at} call ${id} of message ${m.id} has ${count} tool messages (expected 1)`);
      }
    }
    for (const r of results) {
      if (!ids.includes(r.toolCallId ?? "")) {
        out.push(`${at} tool message ${r.id} answers ${r.toolCallId}, not called by ${m.id}`);
      }
    }
    i = j - 1;
  }
}

function checkSummary(sessionId: string, text: string | null, out: string[]): void {
  const at = `session ${sessionId}: summary`;
  if (text === null) return;
  if (parseSummary(text) === null) return void out.push(`${at} is not summary JSON: ${clip(text)}`);
  const value = JSON.parse(text) as Record<string, unknown>;
  const unknown = Object.keys(value).filter((key) => !SUMMARY_KEYS.has(key));
  if (unknown.length > 0) out.push(`${at} has unknown keys ${unknown.join(", ")}`);
  if (typeof value.updated_at !== "string") out.push(`${at} has no updated_at string`);
  for (const field of SUMMARY_FIELDS) {
    const items = value[field] as string[];
    if (items.length > MAX_SUMMARY_ITEMS) {
      out.push(`${at}.${field} has ${items.length} items (at most ${MAX_SUMMARY_ITEMS})`);
    }
  }
}

/**
 * Todos one tool call added more than once: its call key (`<message id>/<call id>`) is unique, so a call run
 * again under another key — the model asked again instead of the call being resolved — shows as the same
 * call id (providers' ids are unique per reply) with two rows.
 */
function repeatedTodos(raw: DatabaseSync): string[] {
  const columns = raw.prepare("PRAGMA table_info(todos)").all().map((row) => String(row.name));
  if (!columns.includes("call_id")) return [];
  const byCall = new Map<string, number>();
  for (const row of raw.prepare("SELECT session_id, call_id FROM todos WHERE call_id IS NOT NULL").all()) {
    const call = `${row.session_id} ${String(row.call_id).split("/").at(-1)}`;
    byCall.set(call, (byCall.get(call) ?? 0) + 1);
  }
  return [...byCall].filter(([, n]) => n > 1).map(([call, n]) => `todo call ${call} added ${n} todos`);
}

async function checkDatabase(path: string, out: string[]): Promise<void> {
  if (!existsSync(path)) return;
  let sessionKeys: SessionKey[];
  try {
    const raw = new DatabaseSync(path);
    try {
      const rows = raw.prepare("PRAGMA integrity_check").all();
      const verdict = rows.map((row) => String(Object.values(row)[0])).join("; ");
      if (verdict !== "ok") out.push(`integrity_check: ${clip(verdict, 300)}`);
      const orphans = raw.prepare("PRAGMA foreign_key_check").all();
      if (orphans.length > 0) out.push(`foreign_key_check: ${orphans.length} rows without their parent`);
      sessionKeys = raw.prepare("SELECT user_id, id FROM sessions ORDER BY user_id, id").all()
        .map((row) => ({ userId: String(row.user_id), sessionId: String(row.id) }));
      out.push(...repeatedTodos(raw));
    } finally {
      raw.close();
    }
  } catch (error) {
    out.push(`cannot check the database: ${(error as Error).message}`);
    return;
  }
  let store: SqliteStore;
  try {
    store = new SqliteStore(path);
  } catch (error) {
    out.push(`cannot open the store: ${(error as Error).message}`);
    return;
  }
  try {
    out.push(...await checkSessionInvariants(store, sessionKeys));
  } finally {
    await store.close();
  }
}

/**
 * The per-session crash invariants on any store, for the sessions of `keys`: every tool call answered by
 * exactly one tool message right after it, a valid summary, `turn_count = compacted_turns + stored user
 * messages`. One message per violation.
 */
export async function checkSessionInvariants(
  store: SessionStore,
  keys: readonly SessionKey[],
): Promise<string[]> {
  const out: string[] = [];
  for (const key of keys) {
    const id = key.sessionId;
    const session = await store.get(key);
    if (session === null) {
      out.push(`session ${id}: not stored`);
      continue;
    }
    let messages: StoredMessage[];
    try {
      messages = await store.messages(key);
    } catch (error) {
      out.push(`session ${id}: cannot read its messages: ${(error as Error).message}`);
      continue;
    }
    checkToolPairs(id, messages, out);
    checkSummary(id, session.summary, out);
    const users = messages.filter((m) => m.role === "user").length;
    if (session.turnCount !== session.compactedTurns + users) {
      out.push(
        `session ${id}: turn_count ${session.turnCount} != compacted_turns ${session.compactedTurns} + ` +
          `${users} stored user messages`,
      );
    }
  }
  return out;
}

/** The trace's crash invariants (see {@linkcode checkCrashInvariants}), one message per violation. */
export function checkTraceInvariants(path: string): string[] {
  const out: string[] = [];
  checkTraceFile(path, out);
  return out;
}

function checkTraceFile(path: string, out: string[]): void {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return;
    throw error;
  }
  const lines = text.split("\n");
  const tail = lines.pop()!;
  let whole = 0;
  lines.forEach((line, i) => {
    const problem = eventProblem(line);
    if (problem === null) whole++;
    else out.push(`trace line ${i + 1} ${problem}: ${clip(line)}`);
  });
  if (tail !== "" && eventProblem(tail) === null) {
    out.push(`trace ends with an unterminated line that parses as an event: ${clip(tail)}`);
  }
  const read = readTrace(path).length;
  if (read !== whole) out.push(`readTrace returned ${read} events; the trace has ${whole} whole event lines`);
}

/**
 * Checks what a crash must never break, and returns one message per violation (empty: all hold): SQLite's
 * `integrity_check` (and foreign keys); per session, every assistant tool call answered by exactly one tool
 * message right after it (the last step's may have none: left running, resolved by the next turn) and no tool
 * message without its call, no todo call that added two todos, a summary that is null or valid (the four
 * string arrays, at most MAX_SUMMARY_ITEMS each), `turn_count = compacted_turns + stored user messages`;
 * every complete trace line an event with the required fields, only the last line possibly torn, and
 * `readTrace` returning exactly the whole events. Missing files count as empty. Call it only while no
 * other process writes the files.
 */
export async function checkCrashInvariants(dbPath: string, tracePath: string): Promise<string[]> {
  const out: string[] = [];
  await checkDatabase(dbPath, out);
  checkTraceFile(tracePath, out);
  return out;
}
