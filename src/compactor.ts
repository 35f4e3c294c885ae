/**
 * Compaction, pure parts: when it is due, where to cut, the summary's schema and its deterministic merge.
 * The loop does the I/O (the summary call, the store's transaction); nothing here reads or writes.
 * @module
 */
import { MAX_SUMMARY_ITEMS } from "./config.ts";
import type { Summary } from "./context.ts";
import { isFrozenToolList } from "./tools/registry.ts";
import type { Message, ToolSchema } from "./types.ts";

/** Longest item a summary field may hold; longer ones make the summary invalid. */
export const MAX_SUMMARY_ITEM_CHARS = 200;
/** The four fields of a summary, in their fixed order. */
export const SUMMARY_FIELDS = ["goals", "facts", "todos", "unresolved"] as const;

/** What the summarizer returns: the four lists, before the runtime merges and stamps them. */
export type SummaryPatch = Pick<Summary, (typeof SUMMARY_FIELDS)[number]>;

/** Estimated tokens of a text: characters / 4, rounded up. Replace this one function for a better one. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/** Estimated tokens of one message: its role, text, call ids, names and arguments. */
export function estimateMessageTokens(message: Message): number {
  let text = message.role + (message.content ?? "") + (message.toolCallId ?? "");
  for (const call of message.toolCalls ?? []) text += call.id + call.name + call.arguments;
  return estimateTokens(text);
}

// The estimate of a frozen tool list (the registry's), computed once.
const toolTokens = new WeakMap<readonly ToolSchema[], number>();

function estimateToolTokens(tools: readonly ToolSchema[]): number {
  if (tools.length === 0) return 0;
  let tokens = toolTokens.get(tools);
  if (tokens === undefined) {
    tokens = estimateTokens(JSON.stringify(tools));
    if (isFrozenToolList(tools)) toolTokens.set(tools, tokens);
  }
  return tokens;
}

/** Estimated tokens of a request: its messages and the tool schemas offered with it. */
export function estimateRequestTokens(
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
): number {
  let tokens = estimateToolTokens(tools);
  for (const message of messages) tokens += estimateMessageTokens(message);
  return tokens;
}

/**
 * Estimated tokens reserved for the [RUNTIME CONTEXT] block when a compaction plans its cut (at most a
 * quarter of the budget). The merged summary is trimmed to fit it, so a compaction always ends within budget.
 */
export const MAX_SUMMARY_TOKENS = 1000;

/** The room a compaction leaves for the summary under a budget of `maxCtxTokens`. */
export function summaryReserve(maxCtxTokens: number): number {
  return Math.min(MAX_SUMMARY_TOKENS, Math.floor(maxCtxTokens / 4));
}

/** Where a compaction cuts, and why. */
export interface CompactionPlan {
  /** Messages before this index go into the summary and are deleted; the message at it is a user message. */
  cutIndex: number;
  trigger: "turns" | "tokens" | "turns+tokens";
  /** True when even the current turn alone does not fit the budget: it is sent anyway. */
  overBudget: boolean;
  /** Estimated request tokens before and after the cut (the summary counted at its largest afterwards). */
  tokensBefore: number;
  tokensAfter: number;
}

/** Options of {@linkcode planCompaction}. */
export interface PlanOptions {
  /** Raw user turns kept; more trigger a compaction (AGENT_MAX_RAW_TURNS). */
  maxRawTurns: number;
  /** Estimated token budget of a request (AGENT_MAX_CTX_TOKENS). */
  maxCtxTokens: number;
  /**
   * Estimated tokens of what every request carries besides messages and summary: system prompt, tools.
   * @default {0}
   */
  fixedTokens?: number;
  /**
   * Estimated tokens of the summary block the request carries now.
   * @default {0}
   */
  currentSummaryTokens?: number;
  /**
   * Estimated tokens of the summary block after a compaction: room the cut must leave.
   * @default {summaryReserve(maxCtxTokens)}
   */
  summaryTokens?: number;
}

/**
 * Plans a compaction of `messages` (the session's raw messages, the current user message last among the
 * user messages), or returns null when neither threshold is exceeded or there is nothing before the current
 * turn to cut. Pure; never throws.
 *
 * The cut always falls on a real user message, so a tool call is never separated from its results and the
 * current user message is always kept. On the turn trigger the last `maxRawTurns` turns stay; on the token
 * trigger the oldest whole turns go until the estimate, with room for the largest summary, fits.
 */
export function planCompaction(messages: readonly Message[], options: PlanOptions): CompactionPlan | null {
  const { maxRawTurns, maxCtxTokens, fixedTokens = 0, currentSummaryTokens = 0 } = options;
  const { summaryTokens = summaryReserve(maxCtxTokens) } = options;
  const starts: number[] = [];
  messages.forEach((m, i) => m.role === "user" && starts.push(i));
  if (starts.length === 0) return null;

  // Suffix sums make every candidate cut's estimate O(1).
  const suffix = new Array<number>(messages.length + 1).fill(0);
  for (let i = messages.length - 1; i >= 0; i--) {
    suffix[i] = suffix[i + 1] + estimateMessageTokens(messages[i]);
  }
  const tokensBefore = fixedTokens + currentSummaryTokens + suffix[0];
  const overTurns = starts.length > maxRawTurns;
  const overTokens = tokensBefore > maxCtxTokens;
  if (!overTurns && !overTokens) return null;

  const last = starts.length - 1;
  let turn = overTurns ? starts.length - maxRawTurns : 0;
  // Whatever the trigger, the kept turns must fit beside the fixed parts and the largest summary, so a
  // compaction never ends over budget unless the current turn alone is.
  const budget = maxCtxTokens - summaryTokens - fixedTokens;
  // Over budget with messages that fit: the stored summary is larger than the reserve (AGENT_MAX_CTX_TOKENS
  // was lowered). Cutting one turn lets the merge trim the summary to the reserve.
  if (overTokens && turn === 0 && last > 0) turn = 1;
  while (turn < last && suffix[starts[turn]] > budget) turn++;
  const overBudget = suffix[starts[turn]] > budget;
  const cutIndex = starts[turn];
  const trigger = overTurns && overTokens ? "turns+tokens" : overTurns ? "turns" : "tokens";
  if (cutIndex === 0) {
    return overBudget ? { cutIndex, trigger, overBudget, tokensBefore, tokensAfter: tokensBefore } : null;
  }
  return {
    cutIndex,
    trigger,
    overBudget,
    tokensBefore,
    tokensAfter: fixedTokens + summaryTokens + suffix[cutIndex],
  };
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
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError("Cannot accept summary: expected a JSON object");
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!(SUMMARY_FIELDS as readonly string[]).includes(key)) {
      throw new TypeError(`Cannot accept summary: unknown key "${key}"`);
    }
  }
  const patch: SummaryPatch = { goals: [], facts: [], todos: [], unresolved: [] };
  for (const field of SUMMARY_FIELDS) {
    const items = record[field] === undefined ? [] : record[field];
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

function dedupeKey(item: string): string {
  return item.toLowerCase().replace(/\s+/g, " ").trim();
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
      const key = dedupeKey(item);
      if (key === "" || seen.has(key)) continue;
      seen.add(key);
      items.push(item);
      if (items.length === MAX_SUMMARY_ITEMS) break;
    }
    return items;
  };
  return {
    goals: merge("goals"),
    facts: merge("facts"),
    todos: merge("todos"),
    unresolved: merge("unresolved"),
    updated_at: now.toISOString(),
  };
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
