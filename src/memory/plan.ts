/**
 * Where a compaction cuts: token counts (estimated per script, or exact with the tokenizer set at start-up),
 * when compaction is due and which whole turns go. Nothing here reads or writes.
 * @module
 */
import type { Message, ToolSchema } from "../types.ts";
import type { TextCounter } from "./tokenizer.ts";
import { imagesOf } from "../llm/wire.ts";

/**
 * Estimated tokens of a text, per script class, as BPE tokenizers of current models split them: a Latin word
 * about one token (its leading space with it; 0.3 more per letter past six), digits in threes, a CJK character
 * 0.7, a run of white space with a line break one (a single space none, more spaces one), and other
 * characters 0.3 each ASCII, 0.5 each beyond, plus 0.2 a run. Weights fitted on English prose, Chinese, JSON
 * and TypeScript against o200k_base; `deno task bench --only tokens` measures them (docs/performance.md).
 * Runs are the longest of one class: Latin letters, digits, white space (as `\s`), other characters (by
 * code point); each CJK (or kana, hangul) character is a run of its own.
 */
export function estimateTokens(text: string): number {
  // One pass over the UTF-16 units, adding in the order of the runs (the sum is the same to the last bit).
  let tokens = 0;
  const n = text.length;
  let i = 0;
  while (i < n) {
    const kind = scriptOf(text.charCodeAt(i));
    if (kind === CJK) {
      tokens += 0.7;
      i += 1;
      continue;
    }
    let j = i + 1;
    if (kind === OTHER) {
      tokens += 0.2;
      for (j = i; j < n;) {
        const unit = text.charCodeAt(j);
        if (scriptOf(unit) !== OTHER) break;
        tokens += unit < 128 ? 0.3 : 0.5;
        // A surrogate pair is one character.
        const pair = unit >= 0xd800 && unit <= 0xdbff && j + 1 < n && isLowSurrogate(text.charCodeAt(j + 1));
        j += pair ? 2 : 1;
      }
      i = j;
      continue;
    }
    while (j < n && scriptOf(text.charCodeAt(j)) === kind) j++;
    const length = j - i;
    if (kind === WORD) tokens += 1.05 + 0.3 * Math.max(0, length - 6);
    else if (kind === DIGITS) tokens += Math.ceil(length / 3);
    else tokens += length > 1 || text.charCodeAt(i) === 0x0a ? 1 : 0;
    i = j;
  }
  return Math.ceil(tokens);
}

const [WORD, DIGITS, CJK, SPACE, OTHER] = [1, 2, 3, 4, 5];

/** The script class of a UTF-16 unit; a surrogate is other (no class holds a character beyond the BMP). */
function scriptOf(unit: number): number {
  if (unit < 128) return ASCII_CLASSES[unit];
  if (
    (unit >= 0x3040 && unit <= 0x30ff) || (unit >= 0x3400 && unit <= 0x9fff) ||
    (unit >= 0xac00 && unit <= 0xd7af) || (unit >= 0xf900 && unit <= 0xfaff)
  ) {
    return CJK;
  }
  return isSpace(unit) ? SPACE : OTHER;
}

/** The class of each ASCII unit. */
const ASCII_CLASSES = Uint8Array.from({ length: 128 }, (_, unit) => {
  if ((unit >= 65 && unit <= 90) || (unit >= 97 && unit <= 122)) return WORD;
  if (unit >= 48 && unit <= 57) return DIGITS;
  return isSpace(unit) ? SPACE : OTHER;
});

/** Whether a UTF-16 unit is white space as a regular expression's `\s` matches it. */
function isSpace(unit: number): boolean {
  return (unit >= 0x09 && unit <= 0x0d) || unit === 0x20 || unit === 0xa0 || unit === 0x1680 ||
    (unit >= 0x2000 && unit <= 0x200a) || unit === 0x2028 || unit === 0x2029 || unit === 0x202f ||
    unit === 0x205f || unit === 0x3000 || unit === 0xfeff;
}

function isLowSurrogate(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}

/** The tokens a provider adds around each message (its role and separators), by the per-script estimate. */
export const MESSAGE_OVERHEAD_TOKENS = 4;

/**
 * The tokens one image of a user message counts, whatever its size: the most Anthropic bills for one, since it
 * scales a larger image down to about 1.15 megapixels and counts width × height / 750 (1092 × 1092 / 750 ≈
 * 1,590). OpenAI's high detail costs less for the same picture (a 1024 × 1024 image: 85 + 170 × 4 = 765), so
 * the figure errs on the side of the budget. Its base64 is never counted as text: the per-script estimate
 * would make some 50,000 tokens of a 100 kB PNG.
 */
export const IMAGE_TOKENS = 1600;

/** The built-in counter: {@linkcode estimateTokens}, dependency-free. */
const PER_SCRIPT: TextCounter = {
  name: "per-script",
  count: estimateTokens,
  messageOverhead: MESSAGE_OVERHEAD_TOKENS,
};

/**
 * How this process counts a request's texts: the per-script estimate, or the exact tokenizer AGENT_TOKENIZER
 * names, set once at start-up by {@linkcode useTokenizer} (one model family per process, like the model).
 */
let counter = PER_SCRIPT;

/** Counts of frozen messages (stored ones are): a message is read once, however often a request is planned. */
let messageTokens = new WeakMap<Message, number>();

/** Counts of frozen tool lists (the registry's are, until its tools change): read once, not every turn. */
let toolsTokens = new WeakMap<readonly ToolSchema[], number>();

/**
 * Counts texts with `tokenizer` from now on (null: the per-script estimate again). Called at start-up, before
 * any request is counted; the counts kept so far are dropped.
 */
export function useTokenizer(tokenizer: TextCounter | null): void {
  counter = tokenizer ?? PER_SCRIPT;
  messageTokens = new WeakMap();
  toolsTokens = new WeakMap();
}

/** The tokens of `text` as this process counts them: exactly with a tokenizer, else estimated per script. */
export function countTokens(text: string): number {
  return counter.count(text);
}

/**
 * Tokens of one message: its text, call ids, names and arguments, the provider state it carries back (as its
 * JSON: it goes out with the message), {@linkcode IMAGE_TOKENS} for each image of a user message, and the
 * message's overhead.
 */
export function estimateMessageTokens(message: Message): number {
  const known = messageTokens.get(message);
  if (known !== undefined) return known;
  let text = (message.content ?? "") + (message.toolCallId ?? "");
  for (const call of message.toolCalls ?? []) text += ` ${call.id} ${call.name} ${call.arguments}`;
  const state = message.providerState;
  if (state !== undefined) text += ` ${JSON.stringify([state.message ?? null, state.calls ?? null])}`;
  const tokens = counter.messageOverhead + counter.count(text) + imagesOf(message).length * IMAGE_TOKENS;
  if (Object.isFrozen(message)) messageTokens.set(message, tokens);
  return tokens;
}

/** Tokens of the tool schemas offered with a request. */
function estimateToolsTokens(tools: readonly ToolSchema[]): number {
  if (tools.length === 0) return 0;
  const known = toolsTokens.get(tools);
  if (known !== undefined) return known;
  const tokens = counter.count(JSON.stringify(tools));
  if (Object.isFrozen(tools)) toolsTokens.set(tools, tokens);
  return tokens;
}

/** Estimated tokens of a request: its messages and the tool schemas offered with it. */
export function estimateRequestTokens(
  messages: readonly Message[],
  tools: readonly ToolSchema[] = [],
): number {
  let tokens = estimateToolsTokens(tools);
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
  /**
   * True when what cannot be cut does not fit the budget (the current turn, or with nothing before it to cut,
   * the summary beside it): it is sent anyway.
   */
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
  /**
   * How the provider's count of the last request compares with the estimate of it: each message's estimate is
   * multiplied by it (the other token options are given already scaled).
   * @default {1}
   */
  scale?: number;
}

/**
 * Plans a compaction of `messages` (the session's raw messages, the current user message last among the
 * user messages), or returns null when neither threshold is exceeded. Over the token budget with nothing before
 * the current turn to cut, the plan cuts nothing (`cutIndex` 0) and is over budget. Pure; never throws.
 *
 * The cut always falls on a real user message, so a tool call is never separated from its results and the
 * current user message is always kept. The turn trigger fires beyond `maxRawTurns + compactBatch` turns and
 * keeps the last `maxRawTurns`; on the token trigger the oldest whole turns go until the estimate, with room
 * for the largest summary, fits.
 */
export function planCompaction(messages: readonly Message[], options: PlanOptions): CompactionPlan | null {
  const { maxRawTurns, maxCtxTokens, compactBatch = 0, fixedTokens = 0, currentSummaryTokens = 0 } = options;
  const { summaryTokens = summaryReserve(maxCtxTokens), scale = 1 } = options;
  const starts: number[] = [];
  messages.forEach((m, i) => m.role === "user" && starts.push(i));
  if (starts.length === 0) return null;

  // Suffix sums make every candidate cut's estimate O(1).
  const suffix = new Array<number>(messages.length + 1).fill(0);
  for (let i = messages.length - 1; i >= 0; i--) {
    suffix[i] = suffix[i + 1] + estimateMessageTokens(messages[i]) * scale;
  }
  const tokensBefore = Math.round(fixedTokens + currentSummaryTokens + suffix[0]);
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
  // Nothing before the current turn to cut (so over on tokens alone): the request goes over budget as it is,
  // whether the turn itself does not fit or a stored summary larger than the reserve, which only a cut trims.
  if (cutIndex === 0) return { cutIndex, trigger, overBudget: true, tokensBefore, tokensAfter: tokensBefore };
  return {
    cutIndex,
    trigger,
    overBudget,
    tokensBefore,
    tokensAfter: Math.round(fixedTokens + summaryTokens + suffix[cutIndex]),
  };
}
