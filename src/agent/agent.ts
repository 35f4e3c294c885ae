/**
 * What a turn is run with: the agent (its model, tools, limits: no storage), the run's store or journal,
 * sinks and signal, the turn's input; and the small rules about a session's turns that the loop and the
 * session layer share.
 * @module
 */
import { SessionError } from "../errors.ts";
import type { EventSink, RunEventData } from "../events.ts";
import type { ResponseFormat, StoredMessage, ToolCall, Usage } from "../types.ts";
import type { LLM } from "../llm/llm.ts";
import type { MemoryStore } from "../store/store.ts";
import type { JournalStore, TurnJournal, TurnReads } from "./journal.ts";
import type { ApprovalPolicy } from "../approval/policy.ts";
import type { Decision } from "../approval/decisions.ts";
import type { ToolRegistry } from "../tools/registry.ts";
import type { MemorySettings } from "../memory/turn_memory.ts";
import type { ResponseFormatMode } from "./response_format.ts";
import type { Clock } from "../clock.ts";
import type { PriceTable } from "../prices.ts";

/**
 * The roles of the store a turn reads and writes its session with (through its journal), and recalls the
 * user's memory from.
 */
export type TurnStore = TurnReads & JournalStore & Pick<MemoryStore, "recallMemory">;

/**
 * What an agent is made of: its model, tools and limits, never its storage (each run is given that). Only
 * `src/runtime.ts` builds the real ones; tests pass fakes.
 */
export interface Agent extends MemorySettings {
  llm: LLM;
  tools: ToolRegistry;
  /** Loop steps per user turn (AGENT_MAX_TOOL_ITERS). */
  maxSteps: number;
  /** Tool calls run per model reply (AGENT_MAX_TOOL_CALLS_PER_STEP); the rest get a tool error. @default {16} */
  maxToolCallsPerStep?: number;
  /** Which tool calls wait for the user's approval or are refused. @default {AUTO_POLICY} */
  approval?: ApprovalPolicy;
  /**
   * How a turn's response format reaches the provider (AGENT_RESPONSE_FORMAT): `native` as
   * `response_format`, `prompt` in the system message only. @default {"native"}
   */
  responseFormatMode?: ResponseFormatMode;
  /**
   * Tokens a turn may spend over its model calls (AGENT_MAX_TURN_TOKENS): prompt + completion, cached prompt
   * tokens included, as reported, else estimated. A call that would pass it is not made; the turn ends
   * `budget`. @default {null} (no budget)
   */
  maxTurnTokens?: number | null;
  /**
   * Seconds a whole turn may take, model calls and tools (AGENT_TURN_TIMEOUT_SECONDS); past them it is taken
   * back and ends `timeout`. @default {null} (no deadline)
   */
  turnTimeoutSeconds?: number | null;
  /** Dollars per million tokens by model (AGENT_PRICES): `run_end` carries the turn's cost. @default {none} */
  prices?: PriceTable;
  /** Where a turn's deadline waits. @default {SYSTEM_CLOCK} */
  clock?: Clock;
  /** @default {() => new Date()} */
  now?: () => Date;
  /** A unique id per call (run ids). @default {() => crypto.randomUUID()} */
  newId?: () => string;
}

/** What one run reports to and is stopped by. */
export interface RunOptions {
  /** Receives every event of the run: the trace, the REPL, an SSE stream. */
  emit: EventSink;
  /** Aborts the turn: the model call in flight and any further step. @default {undefined} */
  signal?: AbortSignal;
  /** Answer text as it streams, with its step: a live view, never traced. @default {undefined} */
  onDelta?: (text: string, step: number) => void;
  /**
   * Called as a step's reasoning streams in, with its step, never with its text (only from a client that
   * reports reasoning: AGENT_SHOW_THINKING): a live view, never traced. @default {undefined}
   */
  onReasoning?: (step: number) => void;
  /**
   * The store of the session: its journal and reads unless given apart, where the user's memory is recalled
   * from (unless `userMemory.store`), what a compaction after the answer reads. Required unless `journal`
   * and `reads` are given. @default {undefined}
   */
  store?: TurnStore;
  /**
   * Where the turn's writes go (its messages, a pause, an abort's rollback, tokens no write carried, a
   * compaction). @default {storeJournal(store, key)} (the session in `store`)
   */
  journal?: TurnJournal;
  /** Where the turn reads its session when it opens, and a compaction after its answer. @default {store} */
  reads?: TurnReads;
  /** Tools the user allowed for the rest of the session ("always"): they need no approval. @default {none} */
  allowed?: ReadonlySet<string>;
}

/**
 * One user turn: a new message, (`retry`) the session's last unanswered one again, or (`decisions`) the
 * resumption of its turn that waits for approval, as the same run.
 */
export interface TurnInput {
  sessionId: string;
  userId: string;
  /** The user's new message; not read with `retry` or `decisions`. */
  message?: string;
  /** Rerun the last unanswered user message instead of adding one: stored once, the turn keeps its number. */
  retry?: boolean;
  /**
   * Resume the turn waiting for approval: a decision ("approve" or "deny") on every waiting call, by call id.
   * Approved calls run, a denied one gets the result "denied by the user", and the loop goes on.
   */
  decisions?: Record<string, Decision>;
  /** An API client's system messages for this turn only, never stored. @default {null} */
  instructions?: string | null;
  /**
   * What this turn's final answer must be (a client's `response_format`): it is passed to the provider, and
   * an answer that does not match gets one repair request, then ends the turn `invalid_output`. Not read with
   * `decisions` (a resumed turn answers in plain text). @default {null}
   */
  responseFormat?: ResponseFormat | null;
}

/** The closing answer when the turn was aborted (client gone, Ctrl-C). */
export const ABORTED_ANSWER = "The turn was cancelled.";

/**
 * The last user message of `history` that no final answer follows (tool calls and results may), or null when
 * the last turn was answered.
 */
export function unansweredMessage(history: readonly StoredMessage[]): StoredMessage | null {
  for (let i = history.length - 1; i >= 0; i--) {
    const m = history[i];
    if (m.role === "user") return m;
    if (m.role === "assistant" && (m.toolCalls ?? []).length === 0) return null;
  }
  return null;
}

/**
 * The calls of the history's last tool step that have no result, with the message that made them: a process
 * stopped while they ran (calls are stored before they run, each result as it ends). Null when there are none.
 * Only the last step can have such calls: they are resolved before anything else is stored.
 */
export function runningCalls(
  history: readonly StoredMessage[],
): { message: StoredMessage; calls: ToolCall[] } | null {
  let end = history.length;
  while (end > 0 && history[end - 1].role === "tool") end--;
  const message = history[end - 1];
  if (message?.role !== "assistant" || (message.toolCalls ?? []).length === 0) return null;
  const answered = new Set(history.slice(end).map((m) => m.toolCallId));
  const calls = message.toolCalls!.filter((call) => !answered.has(call.id));
  return calls.length === 0 ? null : { message, calls };
}

/** The error of a retry on a session whose last turn was answered (or that does not exist). */
export function nothingToRetry(sessionId: string): SessionError {
  const why = `session "${sessionId}" has no unanswered message (its last turn was answered)`;
  return new SessionError(`Cannot retry: ${why}`, "nothing_to_retry");
}

/** The error of a new message or a retry while the session's last turn waits for approval. */
export function approvalPending(sessionId: string): SessionError {
  const why = `session "${sessionId}" has a turn waiting for approval; ` +
    `decide on it first (POST /v1/sessions/${sessionId}/approvals, or answer the prompt in chat)`;
  return new SessionError(`Cannot start a turn: ${why}`, "approval_pending");
}

/** Usage as the trace and the HTTP API spell it, in snake_case like every other key they carry. */
export function usageData(usage: Usage): RunEventData["run_end"]["usage"] {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.totalTokens,
  };
}
