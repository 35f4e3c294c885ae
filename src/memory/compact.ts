/**
 * Writes a session's memory: before a context build, runs a due compaction end to end — plan the cut, ask
 * the summarizer, validate and merge, trim to the reserve, persist atomically. Any failure abandons the
 * compaction and leaves the session as it was.
 * @module
 */
import { estimateMessageTokens, estimateRequestTokens, planCompaction, summaryReserve } from "./plan.ts";
import type { PlanOptions } from "./plan.ts";
import {
  fitSummary,
  mergeSummary,
  parseSummary,
  parseSummaryPatch,
  runtimeContextText,
  type Summary,
  SUMMARY_FIELDS,
  summaryBlock,
} from "./summary.ts";
import { sessionCacheKey } from "../llm/llm.ts";
import { errorMessage } from "../errors.ts";
import type { MemoryWritten, SessionKey, TranscriptStore } from "../store/store.ts";
import { compactionSpan, inSpan } from "../telemetry.ts";
import type { CompactData } from "../events.ts";
import type { Summarizer } from "./summarizer.ts";
import type { Message, StoredMessage, ToolSchema, Usage } from "../types.ts";

/** What compaction needs besides the session's state: the plan's thresholds, and what it works with. */
export interface CompactionDeps
  extends Pick<PlanOptions, "maxRawTurns" | "compactBatch" | "maxCtxTokens" | "scale"> {
  /** Where the compaction is kept: the session's store, or (within a turn) the turn's journal. */
  store: Pick<TranscriptStore, "applyCompaction">;
  summarizer: Summarizer;
  /**
   * Compact only when the request would not fit AGENT_MAX_CTX_TOKENS: a compaction due by the turn trigger
   * alone is left for after the turn (null here). @default {false}
   */
  tokensOnly?: boolean;
  /**
   * AGENT_USER_MEMORY_ITEMS: the summary's facts and goals are merged into the user's memory, in the
   * compaction's transaction, keeping at most this many items; null when memory across sessions is off.
   * @default {null}
   */
  memoryItems?: number | null;
  now: () => Date;
  signal?: AbortSignal;
}

/** What every request of a turn carries besides the history and the summary. */
export interface FixedRequest {
  system: readonly Message[];
  tools: readonly ToolSchema[];
}

/** The session as the loop holds it during a turn. */
export interface MemoryState {
  key: SessionKey;
  /** `sessions.summary`: JSON text or null. */
  summary: string | null;
  /** The raw messages, oldest first. */
  history: StoredMessage[];
}

/**
 * What a compaction attempt did: the new state, the `compact` event's data, the summary call's usage, and what
 * it wrote to the user's memory (null: nothing).
 */
export interface CompactionResult {
  state: MemoryState;
  event: CompactData;
  usage: Usage | null;
  memory: MemoryWritten | null;
}

function summaryTokens(summary: Summary | null): number {
  return summary === null
    ? 0
    : estimateMessageTokens({ role: "system", content: runtimeContextText(summary) });
}

/**
 * The room a compaction leaves for the summary: the reserve, or an empty summary's block when even that is
 * larger (a budget under about 240 estimated tokens). The merged summary is trimmed to the reserve and never
 * below empty, so the plan is never short by the summary the request must carry.
 */
export function summaryRoom(maxCtxTokens: number): number {
  const empty = mergeSummary(null, { goals: [], facts: [], todos: [], unresolved: [] }, new Date(0));
  return Math.max(summaryReserve(maxCtxTokens), summaryTokens(empty));
}

function sizes(summary: Summary): Record<string, number> {
  return Object.fromEntries(SUMMARY_FIELDS.map((field) => [field, summary[field].length]));
}

/** Estimated tokens of the next request: the fixed parts, the summary block and the raw history. */
export function requestTokens(
  state: MemoryState,
  fixed: FixedRequest,
): number {
  return estimateRequestTokens(fixed.system, fixed.tools) + summaryTokens(parseSummary(state.summary)) +
    estimateRequestTokens(state.history);
}

/**
 * Compacts when a threshold is exceeded; resolves to null when nothing is due. Never rejects for a summary
 * problem: an LLM error, a timeout, invalid JSON or a schema violation gives `{ok: false, reason}` with the
 * state unchanged. `fixed` is what every request carries besides messages and summary.
 */
export async function compactIfDue(
  state: MemoryState,
  fixed: FixedRequest,
  deps: CompactionDeps,
): Promise<CompactionResult | null> {
  const { store, summarizer, maxRawTurns, maxCtxTokens, compactBatch, now, signal, scale = 1 } = deps;
  const { memoryItems = null } = deps;
  const previous = parseSummary(state.summary);
  const fixedTokens = estimateRequestTokens(fixed.system, fixed.tools) * scale;
  const plan = planCompaction(state.history, {
    maxRawTurns,
    compactBatch,
    maxCtxTokens,
    fixedTokens,
    currentSummaryTokens: summaryTokens(previous) * scale,
    summaryTokens: summaryRoom(maxCtxTokens) * scale,
    scale,
  });
  if (plan === null || (deps.tokensOnly && plan.trigger === "turns")) return null;
  const base = { trigger: plan.trigger, tokens_before: plan.tokensBefore };
  if (plan.cutIndex === 0) {
    const reason = "the current turn alone is over the token budget; it is sent anyway";
    return { state, event: { ok: false, reason, over_budget: true, ...base }, usage: null, memory: null };
  }

  const cut = state.history.slice(0, plan.cutIndex);
  const started = performance.now();
  let summary: Summary;
  let usage: Usage | null = null;
  try {
    const block = summaryBlock(state.summary);
    const session = {
      system: block === null ? fixed.system : [...fixed.system, block],
      kept: state.history.slice(plan.cutIndex),
      tools: fixed.tools,
      cacheKey: sessionCacheKey(state.key),
    };
    const summarize = () => summarizer({ previous, messages: cut, session }, signal);
    const reply = await inSpan("compaction", summarize, compactionSpan(plan.trigger, cut.length));
    usage = reply.usage;
    const patch = parseSummaryPatch(reply.text);
    summary = fitSummary(mergeSummary(previous, patch, now()), summaryReserve(maxCtxTokens), summaryTokens);
  } catch (error) {
    // Stopped on purpose (the turn cancelled, shutdown): say so with the stop's own reason.
    const reason = signal?.aborted
      ? `abandoned: ${errorMessage(signal.reason ?? error)}`
      : error instanceof SyntaxError
      ? `summary is not valid JSON: ${error.message}`
      : errorMessage(error);
    return { state, event: { ok: false, reason, ...base }, usage, memory: null };
  }

  const turns = cut.filter((m) => m.role === "user").length;
  const text = JSON.stringify(summary);
  // What the user told this session outlives it: the facts and goals go to the user's memory too.
  const items = [...summary.facts, ...summary.goals];
  const memory = memoryItems === null ? undefined : { items, limit: memoryItems };
  let written: MemoryWritten | null;
  try {
    // Only if the summary is still the one merged into: a compaction that ran meanwhile is not overwritten.
    written = await store.applyCompaction(state.key, text, cut.map((m) => m.id), turns, {
      previous: state.summary,
      memory,
    });
  } catch (error) {
    // The transaction rolled back: summary, messages and the user's memory are as they were.
    return {
      state,
      event: { ok: false, reason: `cannot store: ${(error as Error).message}`, ...base },
      usage,
      memory: null,
    };
  }
  const history = state.history.slice(plan.cutIndex);
  const tokensAfter = Math.round(
    fixedTokens + (summaryTokens(summary) + estimateRequestTokens(history)) * scale,
  );
  return {
    state: { key: state.key, summary: text, history },
    event: {
      ok: true,
      ...base,
      messages_removed: cut.length,
      turns_removed: turns,
      tokens_after: tokensAfter,
      tokens_removed: plan.tokensBefore - tokensAfter,
      over_budget: plan.overBudget,
      summary_items: sizes(summary),
      summary_chars: text.length,
      latency_ms: Math.round(performance.now() - started),
    },
    usage,
    memory: written,
  };
}
