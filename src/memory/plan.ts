/**
 * Where a compaction cuts, pure: token estimates, when compaction is due and which whole turns go. Nothing
 * here reads or writes.
 * @module
 */
import type { Message, ToolSchema } from "../types.ts";

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

/** Estimated tokens of a request: its messages and the tool schemas offered with it. */
export function estimateRequestTokens(
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
): number {
  let tokens = tools.length === 0 ? 0 : estimateTokens(JSON.stringify(tools));
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

/** AGENT_COMPACT_BATCH when unset: half of AGENT_MAX_RAW_TURNS, at least 1. */
export function defaultCompactBatch(maxRawTurns: number): number {
  return Math.max(1, Math.floor(maxRawTurns / 2));
}

/** Whether `messages` hold more than `maxRawTurns + compactBatch` user turns: the turn trigger. */
export function overTurnLimit(
  messages: readonly Message[],
  maxRawTurns: number,
  compactBatch: number,
): boolean {
  let turns = 0;
  for (const m of messages) if (m.role === "user") turns++;
  return turns > maxRawTurns + compactBatch;
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
  /** Raw user turns kept by a compaction on the turn trigger (AGENT_MAX_RAW_TURNS). */
  maxRawTurns: number;
  /**
   * Turns allowed beyond `maxRawTurns` before the turn trigger fires (AGENT_COMPACT_BATCH): one compaction
   * then folds them all, so the summary call comes once per batch rather than once per turn.
   * @default {0}
   */
  compactBatch?: number;
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
 * current user message is always kept. The turn trigger fires beyond `maxRawTurns + compactBatch` turns and
 * keeps the last `maxRawTurns`; on the token trigger the oldest whole turns go until the estimate, with room
 * for the largest summary, fits.
 */
export function planCompaction(messages: readonly Message[], options: PlanOptions): CompactionPlan | null {
  const { maxRawTurns, maxCtxTokens, compactBatch = 0, fixedTokens = 0, currentSummaryTokens = 0 } = options;
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
  const overTurns = overTurnLimit(messages, maxRawTurns, compactBatch);
  const overTokens = tokensBefore > maxCtxTokens;
  if (!overTurns && !overTokens) return null;

  const last = starts.length - 1;
  // The turn trigger cuts back to `maxRawTurns`; the budget may cut more, below.
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
