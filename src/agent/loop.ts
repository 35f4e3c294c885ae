/**
 * runTurn(): the bounded tool-calling loop, the runtime's only control flow. Each step asks the model and acts
 * on its native `tool_calls`; limits are checked before every model call; stopping is an outcome. Every write
 * of a turn is a call of its journal in this file (`./journal.ts`); memory and approval plug in
 * (`turn.memory`, `../approval/`).
 * @module
 */
import { LeaseLostError, LlmError, StoreUnavailableError } from "../errors.ts";
import { AGENT_NAME, agentSpan, inSpan, recordModelCall } from "../telemetry.ts";
import type {
  ChatReply,
  FailureKind,
  Message,
  ProviderState,
  StoredMessage,
  ToolCall,
  TurnFailure,
  TurnResult,
} from "../types.ts";
import {
  approvalCalls,
  askedCalls,
  type Decision,
  noPendingApproval,
  refusalFor,
  waitingAnswer,
} from "../approval/decisions.ts";
import { buildContext } from "./context.ts";
import { callKey, DEFAULT_MAX_TOOL_CALLS_PER_STEP, runToolCalls } from "./tool_calls.ts";
import { serializeToolResult } from "../tools/registry.ts";
import {
  ABORTED_ANSWER,
  type Agent,
  runningCalls,
  type RunOptions,
  type TurnInput,
  usageData,
} from "./agent.ts";
import { openTurn, type PausedStep, type Turn } from "./turn.ts";
import { checkAnswer, listed, repairRequest } from "./response_format.ts";
import { isDeadline, TurnDeadline } from "./deadline.ts";
import type { Closing, EventSink } from "../events.ts";
import type { CompactionResult } from "../memory/compact.ts";
import { sessionCacheKey } from "../llm/llm.ts";

export type { Agent, Decision, RunOptions, TurnInput };

/** Sent once, as a runtime message, when the model returns neither text nor tool calls. */
export const EMPTY_REPLY_NUDGE =
  "[runtime] Your last reply was empty. Answer the user's last message, or call one of the tools.";
/** The closing answer after a second empty reply. */
export const EMPTY_ANSWER = "I could not produce an answer to that. Please rephrase or try again.";
/** The result of a call a stopped process left running, when its tool is not safe to repeat. */
export const INTERRUPTED_ERROR =
  "interrupted: the process stopped while this tool ran; it may have taken effect and was not run again";
/** The closing answer when the step limit is reached; the model is not asked again. */
export const MAX_STEPS_ANSWER =
  "I stopped before finishing: this turn reached its limit of tool steps. Ask me to continue if needed.";
/** The closing answer when the next model call would pass the turn's token budget; it is not made. */
export const BUDGET_ANSWER =
  "I stopped before finishing: this turn reached its token budget. Ask me to continue if needed.";
/**
 * The largest provider state (its JSON, in bytes) an assistant message keeps; a larger one is dropped, and
 * the `llm_call` event says so, so that a runaway provider cannot fill the session database.
 */
export const MAX_PROVIDER_STATE_BYTES = 262_144;
/** The answer of a turn that passed its deadline; nothing of it was kept. */
export const TIMEOUT_ANSWER =
  "I stopped: this turn ran out of time and nothing of it was kept. Send it again, or ask for less at once.";
/**
 * The result of each tool call of a reply cut off before its calls were complete (`finish_reason` `length`,
 * or a stream that ended without one): none is run, as their arguments may be partial.
 */
export const CUT_OFF_ERROR = "not run: the model's reply was cut off before its tool calls were complete; " +
  "call again with complete arguments";

/**
 * Runs one user turn to its end — a new message, a retry, or the resumption of a turn that waits for
 * approval (see {@linkcode TurnInput}) — and returns its outcome with the answer text. Fails only for a
 * malformed id, nothing to retry or resume (`SessionError`), an empty message or decisions that do not match
 * (`TypeError`), or a store that fails before the turn starts; model, store and tool problems after that
 * become outcomes and tool results. An aborted turn takes back what it stored.
 */
export function runTurn(input: TurnInput, agent: Agent, run: RunOptions): Promise<TurnResult> {
  return inSpan(`invoke_agent ${AGENT_NAME}`, async () => {
    checkLimits(agent);
    const { signal, clock } = { signal: run.signal, clock: agent.clock };
    using deadline = new TurnDeadline(agent.turnTimeoutSeconds ?? null, { signal, clock });
    const { turn, paused, question } = await openTurn(input, agent, { ...run, signal: deadline.signal });
    const result = await unlessStoreFails(turn, async () => {
      await recoverCalls(turn);
      if (question !== null) await append(turn, [question]);
      return await runSteps(turn, paused);
    });
    await storeUsageLeft(turn);
    // Once answered, a compaction due by the turn trigger runs in the background, after the answer is out.
    const stored = result.failure === undefined || result.outcome === "invalid_output";
    if (stored && result.outcome !== "awaiting_approval") {
      turn.memory.afterAnswer((compaction, emit) => traceCompaction(turn, compaction, null, emit));
    }
    return result;
  }, agentSpan(input.sessionId, agent.llm.info));
}

/**
 * The steps of a turn: the paused step first when it resumes, then ask the model and run its tool calls,
 * until an answer (checked against the response format, if any), a limit, or calls that wait for approval.
 */
async function runSteps(turn: Turn, paused: PausedStep | null): Promise<TurnResult> {
  const { agent, run } = turn;
  if (paused !== null && !await resumeStep(turn, paused)) return await aborted(turn, paused.pending.step);
  let nudged = false;
  let repaired = false;
  let cutOff = false;
  for (let step = turn.steps; step < agent.maxSteps; step++) {
    if (run.signal?.aborted) return await aborted(turn, step);
    await compactIfOverBudget(turn, step);
    await recallMemory(turn, step);
    if (overBudget(turn)) return await answer(turn, step, BUDGET_ANSWER, "budget");
    const reply = await askModel(turn, step);
    // A model client that did not see the abort still answered: the turn was stopped all the same.
    if (isStop(reply.failure?.kind) || run.signal?.aborted) return await aborted(turn, step);
    if (reply.failure !== undefined) return failed(turn, step, reply.failure);
    const { content, toolCalls, providerState } = reply.reply;
    if (toolCalls.length > 0) {
      const calls = uniqueCallIds(toolCalls, `${turn.runId}:${step}`);
      const intent = (stored: ToolCall[]) =>
        append(turn, [{ role: "assistant", content, toolCalls: stored, ...stateOf(providerState) }]);
      if (isCutOff(reply.reply)) {
        const ended = await refuseCutOff(turn, reply.reply, calls, step, !cutOff, intent);
        if (ended !== null) return ended;
        cutOff = true;
        continue;
      }
      // One reply's calls run together: if one waits for the user, all of them wait.
      const asked = askedCalls(calls, agent.approval, run.allowed);
      if (asked.length > 0) return await pause(turn, content, calls, asked, step, providerState);
      if (!await runTools(turn, calls, step, intent)) return await aborted(turn, step);
      continue;
    }
    if (content !== null && content.trim() !== "") {
      const ended = await answerChecked(turn, step, content, !repaired, providerState);
      if (ended !== null) return ended;
      repaired = true;
      continue;
    }
    if (nudged) return await answer(turn, step, EMPTY_ANSWER, "empty");
    nudged = true;
    await append(turn, [{ role: "runtime", content: EMPTY_REPLY_NUDGE }]);
  }
  return await answer(turn, agent.maxSteps - 1, MAX_STEPS_ANSWER, "max_steps");
}

/** Whether the provider cut the reply off: it hit the output limit, or its stream ended without a reason. */
function isCutOff(reply: ChatReply): boolean {
  return reply.finishReason === "length" || reply.finishReason === null;
}

/**
 * Answers the calls of a cut-off reply without running them (nor asking for approval): their arguments may
 * be partial. The first time (`retry`) the calls (by `intent`, as any step's) and a {@linkcode CUT_OFF_ERROR}
 * result for each are stored and it returns null: the model is asked again. The second time the turn ends
 * `error`, its question kept for a retry. Either way `reply_cut_off` says why.
 */
async function refuseCutOff(
  turn: Turn,
  reply: ChatReply,
  calls: readonly ToolCall[],
  step: number,
  retry: boolean,
  intent: (stored: ToolCall[]) => Promise<StoredMessage>,
): Promise<TurnResult | null> {
  const finishReason = reply.finishReason ?? null;
  turn.event("reply_cut_off", step, { finish_reason: finishReason, tool_call_count: calls.length });
  if (!retry) {
    const why = finishReason === null
      ? "its stream ended without a finish_reason"
      : `finish_reason "${finishReason}"`;
    const message = `the model's reply was cut off twice (${why}) before its tool calls were complete; ` +
      "raise the model's output limit or ask for less at once";
    return failed(turn, step, {
      kind: "invalid_response",
      status: null,
      retries: reply.retries ?? 0,
      message,
    });
  }
  if (!await runTools(turn, calls, step, intent, undefined, () => CUT_OFF_ERROR)) {
    return await aborted(turn, step);
  }
  return null;
}

function checkLimits(agent: Agent): void {
  const { maxSteps, maxToolCallsPerStep = DEFAULT_MAX_TOOL_CALLS_PER_STEP, maxTurnTokens = null } = agent;
  if (!Number.isInteger(maxSteps) || maxSteps < 1) {
    throw new RangeError(`maxSteps must be >= 1, got ${maxSteps}`);
  }
  if (!Number.isInteger(maxToolCallsPerStep) || maxToolCallsPerStep < 1) {
    throw new RangeError(`maxToolCallsPerStep must be >= 1, got ${maxToolCallsPerStep}`);
  }
  if (maxTurnTokens !== null && (!Number.isInteger(maxTurnTokens) || maxTurnTokens < 1)) {
    throw new RangeError(`maxTurnTokens must be null or an integer >= 1, got ${maxTurnTokens}`);
  }
}

/** Whether the next model call would pass the turn's token budget: what it spent plus the request's estimate. */
function overBudget(turn: Turn): boolean {
  const max = turn.agent.maxTurnTokens ?? null;
  return max !== null && turn.spent + turn.memory.requestTokens > max;
}

/** Whether a failure stopped the turn (an abort, a lease lost, the deadline) rather than failed it. */
function isStop(kind: FailureKind | undefined): boolean {
  return kind === "aborted" || kind === "lease" || kind === "deadline";
}

/** The before-request hook of memory: a compaction the token budget makes due, reported as this step's. */
async function compactIfOverBudget(turn: Turn, step: number): Promise<void> {
  const compaction = await turn.memory.beforeRequest(turn.run.signal);
  if (compaction === null) return;
  traceCompaction(turn, compaction, step);
  turn.addUsage(compaction.usage);
}

/**
 * Traces a compaction: its `compact` event and, when it wrote the user's memory, its `memory_write`. One of
 * this step's (`step`), or one in the background after the answer (`step` null), which goes to `emit` and
 * carries its own usage, since it counts in no turn.
 */
function traceCompaction(
  turn: Turn,
  compaction: CompactionResult,
  step: number | null,
  emit?: EventSink,
): void {
  const { event, memory } = compaction;
  if (step !== null) turn.event("compact", step, { ...event, background: false });
  else {
    const usage = compaction.usage === null ? null : usageData(compaction.usage);
    turn.event("compact", null, { ...event, background: true, usage }, emit);
  }
  if (memory === null) return;
  const write = { source: "compaction" as const, ...memory };
  turn.event("memory_write", step, step === null ? { ...write, background: true } : write, emit);
}

/**
 * The before-request hook of the user's memory: what the request carries of it, traced when it carries any and
 * it is not what the turn's previous request carried.
 */
async function recallMemory(turn: Turn, step: number): Promise<void> {
  const recall = await turn.memory.recall();
  if (recall === null || recall.kept === 0 || !recall.changed) return;
  const kept = recall.found.slice(0, recall.kept);
  turn.event("memory_recall", step, {
    ids: kept.map((item) => item.id),
    scores: kept.map((item) => Number(item.score.toPrecision(4))),
    dropped: recall.found.length - recall.kept,
  });
}

/** Asks the model for the next reply: the reply, or why there is none (the call failed or was aborted). */
async function askModel(
  turn: Turn,
  step: number,
): Promise<{ reply: ChatReply; failure?: never } | { failure: TurnFailure }> {
  const { signal, onDelta, onReasoning: reasoning } = turn.run;
  const { history, summary, userMemory } = turn.memory;
  const { responseFormat: format, formatText, agent } = turn;
  const messages = buildContext(history, {
    summary,
    instructions: turn.instructions,
    responseFormat: formatText,
    userMemory,
  });
  // An answer with a response format is shown only once it is checked: it does not stream.
  let streamed = false;
  const delta = onDelta === undefined || format !== null ? undefined : (text: string) => {
    streamed = true;
    onDelta(text, step);
  };
  const onReasoning = reasoning === undefined ? undefined : () => reasoning(step);
  const responseFormat = (agent.responseFormatMode ?? "native") === "native" ? format : null;
  const requestTokens = turn.memory.requestTokens;
  const started = performance.now();
  let reply: ChatReply;
  try {
    reply = await agent.llm.chat(messages, {
      tools: turn.tools,
      signal,
      onDelta: delta,
      onReasoning,
      responseFormat,
      // A session's requests share one prompt cache where the provider keys it (Responses).
      cacheKey: sessionCacheKey(turn.key),
    });
  } catch (error) {
    if (signal?.aborted || (error instanceof LlmError && error.kind === "aborted")) {
      return { failure: abortFailure(signal) };
    }
    turn.steps = step + 1;
    const e = error instanceof LlmError ? error : null;
    const kind: FailureKind = e?.kind ?? "internal";
    recordModelCall((performance.now() - started) / 1000, { model: turn.agent.llm.info, errorType: kind });
    const failure = { kind, status: e?.status ?? null, retries: e?.retries ?? 0 };
    return { failure: { ...failure, message: e?.message ?? String(error) } };
  }
  turn.steps = step + 1;
  // Text written before calling tools is shown as it would have streamed, from a model that does not stream.
  if (!streamed && reply.toolCalls.length > 0 && reply.content) delta?.(reply.content);
  const latency = performance.now() - started;
  const state = keptState(reply);
  reply = state.reply;
  const entry = turn.spend(reply, requestTokens);
  recordModelCall(latency / 1000, { model: turn.agent.llm.info, entry });
  turn.memory.calibrate(reply.usage?.promptTokens ?? null);
  turn.event("llm_call", step, {
    model: reply.model,
    latency_ms: Math.round(latency),
    prompt_tokens: reply.usage?.promptTokens ?? null,
    completion_tokens: reply.usage?.completionTokens ?? null,
    total_tokens: reply.usage?.totalTokens ?? null,
    cached_tokens: reply.usage?.cachedTokens ?? null,
    cache_write_tokens: reply.usage?.cacheWriteTokens ?? null,
    tool_call_count: reply.toolCalls.length,
    retries: reply.retries ?? 0,
    ...state.traced,
  });
  return { reply };
}

/**
 * The reply with its provider state when that is within {@linkcode MAX_PROVIDER_STATE_BYTES}, without it
 * otherwise; and what the trace says of it: its size only (`provider_state_bytes`), whether it was dropped.
 */
function keptState(reply: ChatReply): { reply: ChatReply; traced: Record<string, unknown> } {
  const { providerState, ...rest } = reply;
  if (providerState === undefined) return { reply, traced: {} };
  const bytes = new TextEncoder().encode(JSON.stringify(providerState)).byteLength;
  if (bytes <= MAX_PROVIDER_STATE_BYTES) return { reply, traced: { provider_state_bytes: bytes } };
  return { reply: rest, traced: { provider_state_bytes: bytes, provider_state_dropped: true } };
}

/** The `providerState` field of a message, present only when there is one. */
function stateOf(providerState: ProviderState | undefined): { providerState?: ProviderState } {
  return providerState === undefined ? {} : { providerState };
}

/**
 * Runs a reply's tool calls (`refuse`, by default the approval policy and on a resumption the user's
 * decisions, refuses some): `intent` stores the calls before the first runs, and each result is stored as its
 * call ends. False when the turn was aborted meanwhile.
 */
async function runTools(
  turn: Turn,
  calls: readonly ToolCall[],
  step: number,
  intent: (stored: ToolCall[]) => Promise<StoredMessage>,
  resumed?: PausedStep,
  refuse: (call: ToolCall) => string | null = refusalFor(turn.agent.approval, resumed?.decisions),
): Promise<boolean> {
  const { signal } = turn.run;
  const ran = await runToolCalls(calls, {
    tools: turn.agent.tools,
    context: {
      sessionId: turn.key.sessionId,
      userId: turn.key.userId,
      signal,
      memoryWritten: (data) => {
        turn.memory.memoryChanged();
        turn.event("memory_write", step, data);
      },
    },
    maxCalls: turn.agent.maxToolCallsPerStep,
    emit: (name, data) => turn.event(name, step, data),
    refuse,
    intent: async (stored) => (await intent(stored)).id,
    // A resumed step's results stay with its calls, even if the turn is aborted (see resumeStep).
    result: async (message) => void await append(turn, [message], { kept: resumed !== undefined }),
  });
  turn.calls.push(...ran.reported);
  return !signal?.aborted;
}

/**
 * Takes up the paused step with the user's decisions: drops the pending row and stores its assistant message
 * in one transaction, then runs the calls, storing each result as it ends. Once the calls are stored, the
 * step stays, even if the turn is aborted: a second approval finds nothing to approve, so an approved call
 * never starts twice, and one cut short is resolved like any call a stopped process left running. False
 * when the turn was aborted meanwhile.
 */
async function resumeStep(turn: Turn, paused: PausedStep): Promise<boolean> {
  const { pending, decisions } = paused;
  const byId = new Map(pending.toolCalls.map((call) => [call.id, call.name]));
  turn.event("approval_decided", pending.step, {
    decisions: [...decisions].map(([id, decision]) => ({ id, name: byId.get(id)!, decision })),
  });
  const intent = async (stored: ToolCall[]) => {
    const { content, providerState } = pending;
    const [message] = turn.stamp([{
      role: "assistant",
      content,
      toolCalls: stored,
      ...stateOf(providerState),
    }]);
    if (!await turn.journal.resume(pending.runId, [message])) {
      throw noPendingApproval(turn.key.sessionId); // resolved meanwhile: nothing stored, nothing run
    }
    turn.stored([message], { kept: true });
    return message;
  };
  return await runTools(turn, pending.toolCalls, pending.step, intent, paused);
}

/**
 * Resolves the calls a stopped process left running (stored without a result) before the turn's first model
 * call: a call whose tool is safe to repeat (and that the policy does not deny) runs again, any other is
 * answered {@linkcode INTERRUPTED_ERROR} and the model decides. Each is traced as `tool_recovered` and its
 * result stored at once, so each is resolved once.
 */
async function recoverCalls(turn: Turn): Promise<void> {
  const running = runningCalls(turn.memory.history);
  if (running === null) return;
  const { tools, approval } = turn.agent;
  const { sessionId, userId } = turn.key;
  const refuse = refusalFor(approval);
  for (const call of running.calls) {
    if (turn.run.signal?.aborted) return;
    const repeat = tools.safeToRepeat(call.name) && refuse(call) === null;
    const callId = callKey(running.message.id, call.id);
    const result = repeat
      ? await tools.execute(call, { sessionId, userId, signal: turn.run.signal, callId })
      : tools.fit({ ok: false, data: null, error: INTERRUPTED_ERROR, truncated: false });
    const { ok, error } = result;
    turn.event("tool_recovered", null, {
      id: call.id,
      name: call.name,
      decision: repeat ? "ran_again" : "interrupted",
      ok,
      error,
    });
    turn.calls.push({ name: call.name, arguments: call.arguments, ok });
    await append(turn, [{ role: "tool", content: serializeToolResult(result), toolCallId: call.id }]);
  }
}

/** Stores `messages` in one transaction, stamped with this run's ids; the next request carries them. */
async function append(
  turn: Turn,
  messages: readonly Message[],
  options?: { kept?: boolean },
): Promise<StoredMessage> {
  const stamped = turn.stamp(messages);
  // The provider's count of the request just answered, the calls' tokens and the recall's use go with what
  // answers it.
  const calibration = turn.memory.takeCalibration();
  const memoryUsed = turn.memory.takeMemoryUse();
  await turn.journal.append(stamped, { calibration, usage: turn.unstoredUsage(), memoryUsed });
  turn.stored(stamped, options);
  return stamped[0];
}

/**
 * Stores `text` as the answer and ends the turn (`closing` marks a fixed answer the runtime wrote; the
 * model's own answer keeps its `providerState`).
 */
async function answer(
  turn: Turn,
  step: number,
  text: string,
  closing?: Closing,
  providerState?: ProviderState,
): Promise<TurnResult> {
  await append(turn, [{ role: "assistant", content: text, ...stateOf(providerState) }]);
  turn.event("answer", step, closing === undefined ? { text } : { text, closing });
  return turn.end(closing ?? "answered", text);
}

/**
 * Ends the turn with `content` when it matches the turn's response format (or there is none). Otherwise the
 * first time (`repair`) it stores a runtime message naming the errors and returns null: the model is asked
 * again; the second time it stores the answer all the same and ends the turn `invalid_output`.
 */
async function answerChecked(
  turn: Turn,
  step: number,
  content: string,
  repair: boolean,
  providerState: ProviderState | undefined,
): Promise<TurnResult | null> {
  if (turn.responseFormat === null) return await answer(turn, step, content, undefined, providerState);
  const checked = checkAnswer(turn.responseFormat, content);
  if (checked.ok) return await answer(turn, step, checked.json, undefined, providerState);
  const { errors } = checked;
  turn.event("output_invalid", step, { text: content, errors, repair });
  if (repair) {
    await append(turn, [{ role: "runtime", content: repairRequest(content, errors) }]);
    return null;
  }
  await append(turn, [{ role: "assistant", content, ...stateOf(providerState) }]);
  turn.event("answer", step, { text: content });
  const message = `the answer does not match the response format after a repair request: ${listed(errors)}`;
  return turn.end("invalid_output", content, {
    kind: "invalid_output",
    message,
    status: null,
    retries: 0,
    errors,
  });
}

/**
 * Pauses the turn at `step`: stores the reply's content and calls (none run) as the session's pending step,
 * never as an assistant message without results, emits `approval_requested` and ends `awaiting_approval`.
 */
async function pause(
  turn: Turn,
  content: string | null,
  toolCalls: ToolCall[],
  asked: string[],
  step: number,
  providerState: ProviderState | undefined,
): Promise<TurnResult> {
  const { runId, number, seq, key } = turn;
  const pending = {
    ...stateOf(providerState),
    runId,
    turn: number,
    step,
    seq,
    content,
    toolCalls,
    asked,
    createdAt: turn.now().toISOString(),
  };
  await turn.journal.pause(pending, { usage: turn.unstoredUsage() });
  const calls = approvalCalls(pending);
  turn.event("approval_requested", step, { calls });
  return { ...turn.end("awaiting_approval", waitingAnswer(calls, key.sessionId)), approval: { calls } };
}

/**
 * Ends an aborted turn (`timeout` when its deadline stopped it). It comes before the answer is stored, so what
 * the turn stored is taken back (its question too, unless a retry's) but an approved step once its calls are
 * stored, and the trace's error event says so.
 */
async function aborted(turn: Turn, step: number): Promise<TurnResult> {
  const discarded = await turn.journal.discard(turn.saved);
  const failure = abortFailure(turn.run.signal);
  const { kind, status, retries, message } = failure;
  turn.event("error", step, { kind, status, retries, message, discarded_messages: discarded });
  if (kind === "deadline") return turn.end("timeout", TIMEOUT_ANSWER, failure);
  return turn.end("aborted", ABORTED_ANSWER, failure);
}

/** Ends a turn whose model call failed; its question stays stored for a retry. */
function failed(turn: Turn, step: number | null, failure: TurnFailure): TurnResult {
  const { kind, status, retries, message } = failure;
  turn.event("error", step, { kind, status, retries, message });
  return turn.end("error", failedAnswer(failure), failure);
}

/**
 * The answer of a failed turn, `retry` saying how to send it again (each surface names its own way: the chat
 * `/retry`, HTTP its route). An internal error is said by name only: its details are in the trace.
 */
export function failedAnswer(failure: TurnFailure, retry = "retry it"): string {
  const { kind, message } = failure;
  if (kind === "store") {
    return `Sorry, I could not finish: ${message}. ${capitalized(retry)} once it is back.`;
  }
  const what = kind === "internal" ? "an internal error occurred" : message;
  return `Sorry, I could not get an answer from the model: ${what}. ` +
    `Your message is saved; ${retry}, without sending it again.`;
}

function capitalized(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/**
 * Counts the tokens of the turn's calls that no write carried (a reply the turn was stopped after). A store
 * gone meanwhile loses them: the turn has ended already and says so by its outcome.
 */
async function storeUsageLeft(turn: Turn): Promise<void> {
  const left = turn.unstoredUsage();
  if (left.length === 0) return;
  await turn.journal.recordUsage(left).catch(() => {});
}

/**
 * The turn's steps; a session database that becomes unreachable meanwhile ends the turn `error`, saying so.
 * Each save is one transaction, so what the turn stored before stays whole and the question can be retried.
 */
async function unlessStoreFails(turn: Turn, steps: () => Promise<TurnResult>): Promise<TurnResult> {
  try {
    return await steps();
  } catch (error) {
    if (!(error instanceof StoreUnavailableError)) throw error;
    return failed(turn, null, { kind: "store", status: null, retries: 0, message: error.message });
  }
}

/**
 * Why an aborted turn stopped: the lease lost, the deadline passed, or its signal's reason (a client gone,
 * Ctrl-C, shutdown).
 */
function abortFailure(signal: AbortSignal | undefined): TurnFailure {
  const reason = signal?.reason;
  const text = reason instanceof Error ? reason.message : typeof reason === "string" ? reason : "";
  const deadline = isDeadline(reason);
  const message = deadline
    ? `the turn was stopped: ${text}`
    : text === ""
    ? "the turn was aborted"
    : `the turn was aborted: ${text}`;
  const kind = deadline ? "deadline" : reason instanceof LeaseLostError ? "lease" : "aborted";
  return { kind, status: null, retries: 0, message, cause: reason };
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
