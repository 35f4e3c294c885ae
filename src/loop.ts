/**
 * runTurn(): the bounded tool-calling loop, the runtime's only control flow. Each step asks the model and
 * acts on its native `tool_calls`; limits are checked before every model call; stopping is an outcome.
 * @module
 */
import { buildContext, freezeMessage, SYSTEM_PROMPT } from "./context.ts";
import { LlmError, SessionError } from "./errors.ts";
import type { LLM } from "./llm/llm.ts";
import { compactIfDue, type MemoryState } from "./memory/compact.ts";
import type { SessionKey, SessionStore } from "./store/store.ts";
import type { Summarizer } from "./memory/summarizer.ts";
import { DEFAULT_MAX_TOOL_CALLS_PER_STEP, runToolCalls } from "./tool_calls.ts";
import type { ToolRegistry } from "./tools/registry.ts";
import type {
  EventSink,
  RunEvent,
  RunEventName,
  StoredMessage,
  ToolCall,
  TurnOutcome,
  TurnResult,
  TurnToolCall,
  Usage,
} from "./types.ts";

/** Sent once, as a runtime message, when the model returns neither text nor tool calls. */
export const EMPTY_REPLY_NUDGE =
  "[runtime] Your last reply was empty. Answer the user's last message, or call one of the tools.";
/** The closing answer after a second empty reply. */
export const EMPTY_ANSWER = "I could not produce an answer to that. Please rephrase or try again.";
/** The closing answer when the step limit is reached; the model is not asked again. */
export const MAX_STEPS_ANSWER =
  "I stopped before finishing: this turn reached its limit of tool steps. Ask me to continue if needed.";
/** The closing answer when the turn was aborted (client gone, Ctrl-C). */
export const ABORTED_ANSWER = "The turn was cancelled.";

/** What a turn needs. Only `src/main.ts` builds the real ones; tests pass fakes. */
export interface TurnDeps {
  store: SessionStore;
  llm: LLM;
  tools: ToolRegistry;
  /** Receives every event of the run: the trace, the REPL, an SSE stream. */
  emit: EventSink;
  /** Loop steps per user turn (AGENT_MAX_TOOL_ITERS). */
  maxSteps: number;
  /** Writes the summary when a compaction is due. */
  summarizer: Summarizer;
  /** Raw user turns kept before compaction (AGENT_MAX_RAW_TURNS). */
  maxRawTurns: number;
  /** Estimated token budget of a request (AGENT_MAX_CTX_TOKENS). */
  maxCtxTokens: number;
  /**
   * Tool calls run per model reply (AGENT_MAX_TOOL_CALLS_PER_STEP). Each call beyond them gets a tool error
   * naming the limit, so every call still has exactly one result. @default {16}
   */
  maxToolCallsPerStep?: number;
  /** @default {() => new Date()} */
  now?: () => Date;
  /** A unique id per call (run ids, message ids). @default {() => crypto.randomUUID()} */
  newId?: () => string;
  /** Aborts the turn: the in-flight model call and any further steps. @default {undefined} */
  signal?: AbortSignal;
  /**
   * Receives answer text as it streams from the model, with the step it belongs to: a live view only,
   * never traced (the `answer` event holds the full text). @default {undefined}
   */
  onDelta?: (text: string, step: number) => void;
}

/** An agent: a turn's dependencies without the per-call `emit`, `signal` and `onDelta`. */
export type Agent = Omit<TurnDeps, "emit" | "signal" | "onDelta">;

/** One user turn: a new message, or (`retry`) the session's last unanswered one again. */
export interface TurnInput {
  sessionId: string;
  userId: string;
  /** The user's new message; not read with `retry`. */
  message?: string;
  /**
   * Rerun the last user message that has no answer (its turn ended `error`, or a crash cut it short) instead of
   * adding one: no question is stored twice, and the turn keeps its number.
   * @default {false}
   */
  retry?: boolean;
}

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

/** What a turn starts from: its session, the message it answers, and whether that is already stored. */
async function openTurn(input: TurnInput, key: SessionKey, store: SessionStore) {
  const { message, retry = false } = input;
  if (!retry && (typeof message !== "string" || message.trim() === "")) {
    throw new TypeError("Cannot run a turn: the message must be a non-empty string");
  }
  // A retry creates nothing: a session that does not exist has nothing to retry.
  const session = await (retry ? store.get(key) : store.getOrCreate(key));
  const history = session === null ? [] : await store.messages(key);
  if (!retry) return { session: session!, history, message: message!, stored: false };
  const question = unansweredMessage(history);
  if (session === null || question === null || question.content === null) {
    throw new SessionError(
      `Cannot retry: session "${key.sessionId}" has no unanswered message (its last turn was answered)`,
      "nothing_to_retry",
    );
  }
  return { session, history, message: question.content, stored: true };
}

/** Usage as the trace and the HTTP API spell it, in snake_case like every other key they carry. */
export function usageData(usage: Usage): Record<string, number | null> {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.totalTokens,
  };
}

function addUsage(total: Usage, usage: Usage | null): void {
  if (usage === null) return;
  for (const key of ["promptTokens", "completionTokens", "totalTokens"] as const) {
    const value = usage[key];
    if (value !== null) total[key] = (total[key] ?? 0) + value;
  }
}

/** The user-facing text for a failed model call; names the cause, never the key (LlmError omits it). */
function errorAnswer(error: unknown, sessionId: string): string {
  const cause = error instanceof LlmError ? error.message : "an internal error occurred";
  return `Sorry, I could not get an answer from the model: ${cause}. Your message is saved; ` +
    `retry it with /retry in chat or POST /v1/sessions/${sessionId}/retry, without sending it again.`;
}

/**
 * The calls with every id present and distinct: a result is matched to its call by id, so a provider that
 * repeats or omits one would otherwise leave a call with two results or none.
 */
function uniqueCallIds(calls: readonly ToolCall[], prefix: string): ToolCall[] {
  const seen = new Set<string>();
  return calls.map((call, i) => {
    const id = call.id === "" || seen.has(call.id) ? `call_${prefix}_${i}` : call.id;
    seen.add(id);
    return id === call.id ? call : { ...call, id };
  });
}

function abortReason(signal: AbortSignal | undefined): string {
  const reason = signal?.reason;
  const text = reason instanceof Error ? reason.message : typeof reason === "string" ? reason : "";
  return text === "" ? "the turn was aborted" : `the turn was aborted: ${text}`;
}

/**
 * Runs one user turn to its end and returns the outcome with the answer text. Fails only for a malformed
 * session or user id, a retry with nothing to retry (`SessionError`), an empty message (`TypeError`) or a
 * store failure; model and tool problems become outcomes and tool results. A turn aborted before its answer
 * is stored leaves nothing behind: what it stored is deleted again.
 */
export async function runTurn(input: TurnInput, deps: TurnDeps): Promise<TurnResult> {
  const { store, llm, tools, emit, maxSteps, now = () => new Date(), newId = () => crypto.randomUUID() } =
    deps;
  const { signal } = deps;
  if (!Number.isInteger(maxSteps) || maxSteps < 1) {
    throw new RangeError(`maxSteps must be >= 1, got ${maxSteps}`);
  }
  const { maxToolCallsPerStep = DEFAULT_MAX_TOOL_CALLS_PER_STEP } = deps;
  if (!Number.isInteger(maxToolCallsPerStep) || maxToolCallsPerStep < 1) {
    throw new RangeError(`maxToolCallsPerStep must be >= 1, got ${maxToolCallsPerStep}`);
  }

  const key = { userId: input.userId, sessionId: input.sessionId };
  const { session, history, message, stored } = await openTurn(input, key, store);
  let memory: MemoryState = { key, summary: session.summary, history };
  const schemas = tools.schemas();
  const fixed = { system: [{ role: "system" as const, content: SYSTEM_PROMPT }], tools: schemas };
  const runId = newId();
  const turn = stored ? session.turnCount : session.turnCount + 1;
  const usage: Usage = { promptTokens: null, completionTokens: null, totalTokens: null };
  const calls: TurnToolCall[] = [];
  let seq = 0;
  // What this run stored: an abort before the answer takes exactly these back.
  const saved: string[] = [];

  const event = (name: RunEventName, step: number | null, data: Record<string, unknown>): void => {
    const e: RunEvent = {
      ts: now().toISOString(),
      session_id: session.id,
      user_id: session.userId,
      run_id: runId,
      turn,
      event: name,
      step,
      data,
    };
    emit(e);
  };
  const save = async (...messages: Omit<StoredMessage, "id" | "createdAt">[]): Promise<void> => {
    // Frozen like the store's own copies: the same objects go into every request of the turn. The tool calls
    // are copied first, so the model client's own objects are never frozen under it.
    const stamped = messages.map((m) =>
      freezeMessage({
        ...m,
        ...(m.toolCalls === undefined ? {} : { toolCalls: m.toolCalls.map((call) => ({ ...call })) }),
        id: `${runId}:${seq++}`,
        createdAt: now().toISOString(),
      })
    );
    await store.append(key, stamped);
    memory.history.push(...stamped);
    saved.push(...stamped.map((m) => m.id));
  };
  const finish = (outcome: TurnOutcome, answer: string, steps: number): TurnResult => {
    event("run_end", null, { outcome, steps, tool_calls: calls.length, usage: usageData(usage) });
    return { sessionId: session.id, runId, turn, outcome, answer, toolCalls: calls, usage };
  };

  // An abort comes before the answer is stored: the turn is taken back (its question too, unless a retry's),
  // and the trace's error event says so.
  const abort = async (step: number, steps: number): Promise<TurnResult> => {
    const discarded = await store.discardMessages(key, saved);
    event("error", step, {
      kind: "aborted",
      status: null,
      retries: 0,
      message: abortReason(signal),
      discarded_messages: discarded,
    });
    return finish("aborted", ABORTED_ANSWER, steps);
  };

  event("run_start", null, { user_id: input.userId, message, ...(stored ? { retry: true } : {}) });
  if (!stored) await save({ role: "user", content: message });

  let nudged = false;
  let compacting = true;
  for (let step = 0; step < maxSteps; step++) {
    if (signal?.aborted) return abort(step, step);
    if (compacting) {
      const { summarizer, maxRawTurns, maxCtxTokens } = deps;
      const compaction = await compactIfDue(memory, fixed, {
        store,
        summarizer,
        maxRawTurns,
        maxCtxTokens,
        now,
        signal,
      });
      if (compaction !== null) {
        event("compact", step, compaction.event);
        addUsage(usage, compaction.usage);
        memory = compaction.state;
        // A failed (or impossible) compaction is not retried within the turn: one summary call per problem.
        compacting = compaction.event.ok === true;
      }
    }
    const messages = buildContext(memory.history, { summary: memory.summary });
    const started = performance.now();
    let reply;
    try {
      const onDelta = deps.onDelta === undefined ? undefined : (text: string) => deps.onDelta!(text, step);
      reply = await llm.chat(messages, { tools: schemas, signal, onDelta });
    } catch (error) {
      if (signal?.aborted || (error instanceof LlmError && error.kind === "aborted")) {
        return abort(step, step);
      }
      const e = error instanceof LlmError ? error : null;
      event("error", step, {
        kind: e?.kind ?? "internal",
        status: e?.status ?? null,
        retries: e?.retries ?? 0,
        message: e?.message ?? String(error),
      });
      return finish("error", errorAnswer(error, session.id), step + 1);
    }
    addUsage(usage, reply.usage);
    event("llm_call", step, {
      model: reply.model,
      latency_ms: Math.round(performance.now() - started),
      prompt_tokens: reply.usage?.promptTokens ?? null,
      completion_tokens: reply.usage?.completionTokens ?? null,
      total_tokens: reply.usage?.totalTokens ?? null,
      tool_call_count: reply.toolCalls.length,
      retries: reply.retries ?? 0,
    });

    if (reply.toolCalls.length > 0) {
      const ran = await runToolCalls(uniqueCallIds(reply.toolCalls, `${runId}:${step}`), {
        tools,
        context: { sessionId: session.id, userId: session.userId, signal },
        maxCalls: maxToolCallsPerStep,
        emit: (name, data) => event(name, step, data),
      });
      calls.push(...ran.reported);
      // The call and all its results land in one transaction, or (aborted) not at all.
      if (signal?.aborted) return abort(step, step + 1);
      await save({ role: "assistant", content: reply.content, toolCalls: ran.calls }, ...ran.results);
      continue;
    }

    if (reply.content !== null && reply.content.trim() !== "") {
      await save({ role: "assistant", content: reply.content });
      event("answer", step, { text: reply.content });
      return finish("answered", reply.content, step + 1);
    }

    if (!nudged) {
      nudged = true;
      await save({ role: "runtime", content: EMPTY_REPLY_NUDGE });
      continue;
    }
    await save({ role: "assistant", content: EMPTY_ANSWER });
    event("answer", step, { text: EMPTY_ANSWER, closing: "empty" });
    return finish("empty", EMPTY_ANSWER, step + 1);
  }

  await save({ role: "assistant", content: MAX_STEPS_ANSWER });
  event("answer", maxSteps - 1, { text: MAX_STEPS_ANSWER, closing: "max_steps" });
  return finish("max_steps", MAX_STEPS_ANSWER, maxSteps);
}
