/**
 * The structured memory compaction keeps for a session: its shape, how a stored one is read, how the
 * summarizer's reply is checked, merged into the old one and trimmed to fit, and the [RUNTIME CONTEXT] text
 * the model reads. Pure.
 * @module
 */
import { memoryKey } from "../store/memory_text.ts";
import type { MemoryItem } from "../store/store.ts";
import { isRecord } from "../_json.ts";
import type { Message } from "../types.ts";

/** Most items a summary field keeps. */
export const MAX_SUMMARY_ITEMS = 5;
/** Longest item a summary field may hold; longer ones make the summary invalid. */
export const MAX_SUMMARY_ITEM_CHARS = 200;
/** The four fields of a summary, in their fixed order. */
export const SUMMARY_FIELDS = ["goals", "facts", "todos", "unresolved"] as const;

/** What the summarizer returns: the four lists, before the runtime merges and stamps them. */
export type SummaryPatch = Record<(typeof SUMMARY_FIELDS)[number], string[]>;

/** The first line of the runtime-context block; only the runtime writes it. */
export const RUNTIME_CONTEXT_HEADER = "[RUNTIME CONTEXT]";

/** The structured memory compaction keeps for a session: the four lists, and when they were merged last. */
export type Summary = SummaryPatch & { updated_at: string };

function stringList(value: unknown): string[] | null {
  return Array.isArray(value) && value.every((item) => typeof item === "string") ? value : null;
}

/** Parses a stored summary; null when absent or not of the summary's shape. Never throws. */
export function parseSummary(text: string | null): Summary | null {
  if (text === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (!isRecord(value)) return null;
  const lists = SUMMARY_FIELDS.map((field) => stringList(value[field]));
  if (lists.includes(null)) return null;
  const [goals, facts, todos, unresolved] = lists as string[][];
  const updatedAt = typeof value.updated_at === "string" ? value.updated_at : "";
  return { goals, facts, todos, unresolved, updated_at: updatedAt };
}

/** An item of the user's memory as the [RUNTIME CONTEXT] block carries it. */
export type MemoryEntry = Pick<MemoryItem, "id" | "text">;

/**
 * The text of a [RUNTIME CONTEXT] system message for a summary (null: none) and the items recalled from the
 * user's memory (`user_memory`, last, only when there are some), with their keys in a fixed order: the same
 * data gives the same bytes. A request carries the summary's block before its history and the recall's
 * after it (see `buildContext`).
 */
export function runtimeContextText(summary: Summary | null, memory: readonly MemoryEntry[] = []): string {
  const data: Record<string, unknown> = {};
  if (summary !== null) {
    const { goals, facts, todos, unresolved, updated_at } = summary;
    Object.assign(data, { goals, facts, todos, unresolved, updated_at });
  }
  if (memory.length > 0) data.user_memory = memory.map(({ id, text }) => ({ id, text }));
  return `${RUNTIME_CONTEXT_HEADER}\nThe following data is provided by the runtime and is not a user message.\n` +
    JSON.stringify(data);
}

/** The summary block last built, with its summary: every request of a session until it compacts has it. */
let lastSummary: { summary: string; message: Message | null } | null = null;

/**
 * The [RUNTIME CONTEXT] system message of a stored summary (`sessions.summary`), frozen, so that its JSON is
 * built once for the requests that carry it; null when there is none or it is not valid.
 */
export function summaryBlock(summary: string | null): Message | null {
  if (summary === null) return null;
  if (lastSummary?.summary === summary) return lastSummary.message;
  const parsed = parseSummary(summary);
  const message = parsed === null
    ? null
    : Object.freeze({ role: "system" as const, content: runtimeContextText(parsed) });
  lastSummary = { summary, message };
  return message;
}

/** Removes one surrounding ```json fence, which models add even when told not to. */
function unfence(text: string): string {
  const match = /^\s*```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/i.exec(text);
  return match ? match[1] : text;
}

/**
 * Parses and validates a summarizer's reply: a JSON object with at most the four fields, each an array of
 * strings of at most MAX_SUMMARY_ITEM_CHARS. A missing field counts as empty (null does not); whitespace and
 * control characters are collapsed to single spaces and blank items dropped.
 * Throws `SyntaxError` for invalid JSON and `TypeError` naming the first schema violation.
 */
export function parseSummaryPatch(text: string): SummaryPatch {
  const value: unknown = JSON.parse(unfence(text));
  if (!isRecord(value)) {
    throw new TypeError("Cannot accept summary: expected a JSON object");
  }
  for (const key of Object.keys(value)) {
    if (!(SUMMARY_FIELDS as readonly string[]).includes(key)) {
      throw new TypeError(`Cannot accept summary: unknown key "${key}"`);
    }
  }
  const patch: SummaryPatch = { goals: [], facts: [], todos: [], unresolved: [] };
  for (const field of SUMMARY_FIELDS) {
    const items = value[field] === undefined ? [] : value[field];
    if (!Array.isArray(items)) throw new TypeError(`Cannot accept summary: "${field}" must be an array`);
    for (const [i, item] of items.entries()) {
      if (typeof item !== "string") {
        throw new TypeError(`Cannot accept summary: ${field}[${i}] must be a string, got ${typeof item}`);
      }
      if (item.length > MAX_SUMMARY_ITEM_CHARS) {
        throw new TypeError(
          `Cannot accept summary: ${field}[${i}] is ${item.length} characters, at most ${MAX_SUMMARY_ITEM_CHARS}`,
        );
      }
      // Control characters (a pasted bell, a stray NUL) are noise, not meaning: they become spaces.
      // deno-lint-ignore no-control-regex
      const clean = item.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ").replace(/\s+/g, " ").trim();
      if (clean !== "") patch[field].push(clean);
    }
  }
  return patch;
}

/**
 * Merges a new patch into the old summary: per field, new items first, then old ones, duplicates removed
 * (case- and whitespace-insensitive, the first spelling wins), at most MAX_SUMMARY_ITEMS. An old item the
 * patch omits survives until newer ones push it out. Pure.
 */
export function mergeSummary(old: Summary | null, patch: SummaryPatch, now: Date): Summary {
  const merge = (field: (typeof SUMMARY_FIELDS)[number]): string[] => {
    const seen = new Set<string>();
    const items: string[] = [];
    for (const item of [...patch[field], ...(old?.[field] ?? [])]) {
      const key = memoryKey(item);
      if (key === "" || seen.has(key)) continue;
      seen.add(key);
      items.push(item);
      if (items.length === MAX_SUMMARY_ITEMS) break;
    }
    return items;
  };
  const summary = {} as Summary;
  for (const field of SUMMARY_FIELDS) summary[field] = merge(field);
  summary.updated_at = now.toISOString();
  return summary;
}

/**
 * Trims a summary until `tokensOf(summary)` is at most `maxTokens`, dropping the oldest item (the last) of
 * the longest field first. Pure; returns the summary itself when it already fits.
 */
export function fitSummary(summary: Summary, maxTokens: number, tokensOf: (s: Summary) => number): Summary {
  let fitted = summary;
  while (tokensOf(fitted) > maxTokens) {
    const field = [...SUMMARY_FIELDS].sort((a, b) => fitted[b].length - fitted[a].length)[0];
    if (fitted[field].length === 0) break;
    fitted = { ...fitted, [field]: fitted[field].slice(0, -1) };
  }
  return fitted;
}
