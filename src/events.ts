/**
 * What a run reports, as it happens: one event type, a union with one interface per event and typed data. The
 * trace writes it, the REPL shows it, HTTP streams it; all of them read it through these types.
 * @module
 */
import type { ApprovalCall, ToolCall, ToolResult, TurnFailure, TurnOutcome } from "./types.ts";

/** Why the runtime wrote the answer itself: a second empty reply, the step limit, the token budget. */
export type Closing = "empty" | "max_steps" | "budget";

/** The names of the events a run emits, in the order they can occur. */
export const RUN_EVENT_NAMES = [
  "run_start",
  "tool_recovered",
  "llm_call",
  "reply_cut_off",
  "tool_call",
  "tool_result",
  "approval_requested",
  "approval_decided",
  "compact",
  "memory_write",
  "memory_recall",
  "output_invalid",
  "answer",
  "error",
  "run_end",
] as const;

/** One of {@linkcode RUN_EVENT_NAMES}. */
export type RunEventName = (typeof RUN_EVENT_NAMES)[number];

/** Token counts in the trace's spelling, null where none was given (a type alias: event data are records). */
export type UsageData = {
  prompt_tokens: number | null;
  completion_tokens: number | null;
  total_tokens: number | null;
};

/** The data of each event, by name. */
export interface RunEventData {
  run_start: { user_id: string; message: string; retry?: true };
  llm_call: UsageData & {
    model: string;
    latency_ms: number;
    /** Of `prompt_tokens`, those the provider read from its prompt cache; null when it did not say. */
    cached_tokens: number | null;
    /** Of `prompt_tokens`, those the provider wrote to its prompt cache; null when it did not say. */
    cache_write_tokens: number | null;
    tool_call_count: number;
    retries: number;
  };
  /**
   * A reply with tool calls was cut off: `finish_reason` `length`, or `null` when its stream ended without
   * one. None of its calls runs (nor asks for approval): the first time each is answered with an error and
   * the model is asked again; the second time the turn ends `error`. No arguments, no text.
   */
  reply_cut_off: { finish_reason: string | null; tool_call_count: number };
  /**
   * Before the turn's first model call: a call a stopped process left running (stored, no result) is
   * resolved, run again when its tool is safe to repeat, else answered as interrupted.
   */
  tool_recovered: Pick<ToolCall, "id" | "name"> & Pick<ToolResult, "ok" | "error"> & {
    decision: "ran_again" | "interrupted";
  };
  tool_call: { id: string; name: string; arguments: string };
  tool_result: { id: string; name: string } & ToolResult;
  /** The turn pauses: these calls wait for the user (the reply's other calls wait with them). */
  approval_requested: { calls: ApprovalCall[] };
  /** The user decided; the paused step runs, resuming the same run. */
  approval_decided: { decisions: { id: string; name: string; decision: "approve" | "deny" }[] };
  compact: CompactData;
  /**
   * The user's memory was written: at a compaction (its summary's facts and goals) or by a tool. `ids` are the
   * items written (new or folded into one kept), `added` how many were new, `evicted` how many least recently
   * used items left for the limit, `removed` how many a `forget` deleted.
   */
  memory_write: {
    source: "compaction" | "remember" | "forget";
    ids: number[];
    added: number;
    evicted: number;
    removed?: number;
    background?: boolean;
  };
  /**
   * Before a model call that carries items of the user's memory: which (ids, most relevant first, with their
   * scores) and how many found items did not fit the token budget. No text.
   */
  memory_recall: { ids: number[]; scores: number[]; dropped: number };
  /**
   * An answer that does not match the turn's response format: with `repair`, a repair request naming the
   * errors follows and the model is asked again; without, the turn ends `invalid_output`.
   */
  output_invalid: { text: string; errors: string[]; repair: boolean };
  answer: { text: string; closing?: Closing };
  error: Pick<TurnFailure, "kind" | "status" | "retries" | "message"> & {
    /** On an abort: how many stored messages of the turn were taken back. */
    discarded_messages?: number;
  };
  run_end: {
    outcome: TurnOutcome;
    steps: number;
    tool_calls: number;
    usage: UsageData;
    /**
     * With AGENT_PRICES: the turn's model calls in dollars (tokens as reported, else estimated; cached prompt
     * tokens at the model's cached price when it has one); null when a model has no price.
     */
    cost_usd?: number | null;
  };
}

/** What a compaction did: what it folded away, or why it did not. */
export type CompactData =
  & {
    trigger: "turns" | "tokens" | "turns+tokens";
    tokens_before: number;
    /** True when it ran after the answer, off the turn's path; it then carries its own usage. */
    background?: boolean;
    usage?: UsageData | null;
  }
  & (
    | { ok: false; reason: string; over_budget?: true }
    | {
      ok: true;
      messages_removed: number;
      turns_removed: number;
      tokens_after: number;
      tokens_removed: number;
      over_budget: boolean;
      summary_items: Record<string, number>;
      summary_chars: number;
      latency_ms: number;
    }
  );

/** One event named `N`: where it happened, and its data. */
export interface RunEventOf<N extends RunEventName> {
  ts: string;
  session_id: string;
  user_id: string;
  run_id: string;
  turn: number;
  event: N;
  /** The loop step, or null for events of the whole run (`run_start`, `run_end`). */
  step: number | null;
  data: RunEventData[N];
}

/** Any event of a run. */
export type RunEvent = { [N in RunEventName]: RunEventOf<N> }[RunEventName];

/**
 * An event as read back from a trace file: its envelope as written, its data unchecked (lines written by
 * another release, or before `user_id` existed, may differ).
 */
export type TracedEvent = Omit<RunEventOf<RunEventName>, "user_id" | "data"> & {
  user_id?: string;
  data: Record<string, unknown>;
};

/** Receives every event of a run as it happens. Must not throw. */
export type EventSink = (event: RunEvent) => void;

/**
 * Whether `event` is a background compaction's (its `compact`, or the `memory_write` that goes with it): traced
 * after its run's `run_end`, carried by no turn's stream.
 */
export function isBackgroundEvent(event: { event?: unknown; data?: unknown }): boolean {
  return (event.event === "compact" || event.event === "memory_write") &&
    (event.data as { background?: unknown } | undefined)?.background === true;
}
