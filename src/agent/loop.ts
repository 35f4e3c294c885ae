/**
 * runTurn(): the bounded tool-calling loop, the runtime's only control flow. Each step asks the model and acts
 * on its native `tool_calls`; limits are checked before every model call; stopping is an outcome.
 * @module
 */
import { LlmError, StoreUnavailableError } from "../errors.ts";
import { AGENT_NAME, agentSpan, inSpan } from "../telemetry.ts";
import type { ChatReply, ToolCall, TurnResult } from "../types.ts";
import type { PendingStep } from "../store/store.ts";
import { buildContext } from "./context.ts";
import {
  askedCalls,
  checkDecisions,
  type Decision,
  noPendingApproval,
  pause,
  refusalFor,
} from "./approval.ts";
import { DEFAULT_MAX_TOOL_CALLS_PER_STEP, runToolCalls } from "./tool_calls.ts";
import type { Agent, RunOptions, TurnInput } from "./agent.ts";
import { Turn } from "./turn.ts";

export type { Agent, Decision, RunOptions, TurnInput };

/** Sent once, as a runtime message, when the model returns neither text nor tool calls. */
export const EMPTY_REPLY_NUDGE =
  "[runtime] Your last reply was empty. Answer the user's last message, or call one of the tools.";
/** The closing answer after a second empty reply. */
export const EMPTY_ANSWER = "I could not produce an answer to that. Please rephrase or try again.";
/** The closing answer when the step limit is reached; the model is not asked again. */
export const MAX_STEPS_ANSWER =
  "I stopped before finishing: this turn reached its limit of tool steps. Ask me to continue if needed.";

/**
 * Runs one user turn to its end and returns the outcome with the answer text. Fails only for a malformed id,
 * nothing to retry (`SessionError`), an empty message (`TypeError`) or a store failure; model and tool
 * problems become outcomes and tool results. A turn aborted before its answer is stored leaves nothing behind.
 */
export function runTurn(input: TurnInput, agent: Agent, run: RunOptions): Promise<TurnResult> {
  return inSpan(
    `invoke_agent ${AGENT_NAME}`,
    () => openAndRun(input, agent, run),
    agentSpan(input.sessionId),
  );
}

/** What resumes a turn that waits for approval: the session, and a decision on every waiting call. */
export interface ResumeInput {
  sessionId: string;
  userId: string;
  /** Call id to "approve" or "deny"; checked against the pending step. */
  decisions: Record<string, Decision>;
}

/**
 * Resumes the session's turn that waits for approval, as the same run: runs the approved calls (a denied one
 * gets the result "denied by the user"), stores the step with all its results, and goes on with the loop.
 * `SessionError` when nothing waits, `TypeError` when the decisions do not match the waiting calls.
 */
export function resumeTurn(input: ResumeInput, agent: Agent, run: RunOptions): Promise<TurnResult> {
  return inSpan(
    `invoke_agent ${AGENT_NAME}`,
    () => resumeAndRun(input, agent, run),
    agentSpan(input.sessionId),
  );
}

/** Opens the turn, runs its steps, and leaves a compaction the answer made due to the background. */
async function openAndRun(input: TurnInput, agent: Agent, run: RunOptions): Promise<TurnResult> {
  checkLimits(agent);
  const turn = await Turn.open(input, agent, run);
  return ended(turn, await unlessStoreFails(turn, () => runSteps(turn, 0)));
}

async function resumeAndRun(input: ResumeInput, agent: Agent, run: RunOptions): Promise<TurnResult> {
  checkLimits(agent);
  const key = { userId: input.userId, sessionId: input.sessionId };
  const pending = await agent.store.pendingStep(key);
  if (pending === null) throw noPendingApproval(key.sessionId);
  const decisions = checkDecisions(pending, input.decisions);
  const turn = await Turn.resume(key, pending, agent, run);
  return ended(turn, await unlessStoreFails(turn, () => resumeSteps(turn, pending, decisions)));
}

async function resumeSteps(
  turn: Turn,
  pending: PendingStep,
  decisions: ReadonlyMap<string, Decision>,
): Promise<TurnResult> {
  const byId = new Map(pending.toolCalls.map((call) => [call.id, call.name]));
  turn.event("approval_decided", pending.step, {
    decisions: [...decisions].map(([id, decision]) => ({ id, name: byId.get(id)!, decision })),
  });
  const { step, content, toolCalls } = pending;
  const ran = await runTools(turn, content, toolCalls, step, { decisions, resolve: pending.runId });
  if (!ran) return await turn.abort(step, step + 1);
  return await runSteps(turn, step + 1);
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
    turn.event("error", null, { kind: "store", status: null, retries: 0, message: error.message });
    const answer = `Sorry, I could not finish: ${error.message}. Retry once it is back ` +
      `(/retry in chat or POST /v1/sessions/${turn.key.sessionId}/retry).`;
    return turn.finish("error", answer, 0);
  }
}

/** Once answered, a compaction due by the turn trigger runs in the background, after the answer is out. */
function ended(turn: Turn, result: TurnResult): TurnResult {
  // A turn that waits for approval is not over: nothing is compacted under it.
  if (!["aborted", "error", "awaiting_approval"].includes(result.outcome)) turn.compactAfterAnswer();
  return result;
}

/**
 * The steps of a turn from `first` (a resumed turn counts its earlier steps): ask the model, run its tool
 * calls, until an answer, a limit, or calls that wait for approval.
 */
async function runSteps(turn: Turn, first: number): Promise<TurnResult> {
  const { agent, run } = turn;
  let nudged = false;
  for (let step = first; step < agent.maxSteps; step++) {
    if (run.signal?.aborted) return await turn.abort(step, step);
    await turn.compactIfDue(step);
    const reply = await askModel(turn, step);
    if ("outcome" in reply) return reply;
    if (reply.toolCalls.length > 0) {
      const calls = uniqueCallIds(reply.toolCalls, `${turn.runId}:${step}`);
      // One reply's calls run together: if one waits for the user, all of them wait.
      const asked = askedCalls(calls, agent, run);
      if (asked.length > 0) return await pause(turn, reply.content, calls, asked, step);
      if (!await runTools(turn, reply.content, calls, step)) return await turn.abort(step, step + 1);
      continue;
    }
    if (reply.content !== null && reply.content.trim() !== "") return await turn.answer(step, reply.content);
    if (!nudged) {
      nudged = true;
      await turn.save({ role: "runtime", content: EMPTY_REPLY_NUDGE });
      continue;
    }
    return await turn.answer(step, EMPTY_ANSWER, "empty");
  }
  return await turn.answer(agent.maxSteps - 1, MAX_STEPS_ANSWER, "max_steps");
}

function checkLimits(agent: Agent): void {
  const { maxSteps, maxToolCallsPerStep = DEFAULT_MAX_TOOL_CALLS_PER_STEP } = agent;
  if (!Number.isInteger(maxSteps) || maxSteps < 1) {
    throw new RangeError(`maxSteps must be >= 1, got ${maxSteps}`);
  }
  if (!Number.isInteger(maxToolCallsPerStep) || maxToolCallsPerStep < 1) {
    throw new RangeError(`maxToolCallsPerStep must be >= 1, got ${maxToolCallsPerStep}`);
  }
}

/** Asks the model for the next reply; a failed or aborted call ends the turn, and its result is returned. */
async function askModel(turn: Turn, step: number): Promise<ChatReply | TurnResult> {
  const { signal, onDelta } = turn.run;
  const { history, summary } = turn.memory;
  const messages = buildContext(history, { summary, instructions: turn.instructions });
  const started = performance.now();
  let reply: ChatReply;
  try {
    const delta = onDelta === undefined ? undefined : (text: string) => onDelta(text, step);
    reply = await turn.agent.llm.chat(messages, { tools: turn.tools, signal, onDelta: delta });
  } catch (error) {
    if (signal?.aborted || (error instanceof LlmError && error.kind === "aborted")) {
      return await turn.abort(step, step);
    }
    const e = error instanceof LlmError ? error : null;
    const message = e?.message ?? String(error);
    turn.event("error", step, {
      kind: e?.kind ?? "internal",
      status: e?.status ?? null,
      retries: e?.retries ?? 0,
      message,
    });
    return turn.finish("error", errorAnswer(error, turn.key.sessionId), step + 1);
  }
  turn.addUsage(reply.usage);
  turn.event("llm_call", step, {
    model: reply.model,
    latency_ms: Math.round(performance.now() - started),
    prompt_tokens: reply.usage?.promptTokens ?? null,
    completion_tokens: reply.usage?.completionTokens ?? null,
    total_tokens: reply.usage?.totalTokens ?? null,
    tool_call_count: reply.toolCalls.length,
    retries: reply.retries ?? 0,
  });
  return reply;
}

/**
 * Runs a reply's tool calls and stores the call with all its results in one transaction; false when the
 * turn was aborted meanwhile (then nothing of the step is stored). With `resolve`, the step is that run's
 * paused one: it is stored and its pending row dropped in the same transaction.
 */
async function runTools(
  turn: Turn,
  content: string | null,
  calls: readonly ToolCall[],
  step: number,
  resumed?: { decisions: ReadonlyMap<string, Decision>; resolve: string },
): Promise<boolean> {
  const { signal } = turn.run;
  const ran = await runToolCalls(calls, {
    tools: turn.agent.tools,
    context: { sessionId: turn.key.sessionId, userId: turn.key.userId, signal },
    maxCalls: turn.agent.maxToolCallsPerStep,
    emit: (name, data) => turn.event(name, step, data),
    refuse: refusalFor(turn.agent, resumed?.decisions),
  });
  turn.calls.push(...ran.reported);
  if (signal?.aborted) return false;
  const messages = [{ role: "assistant" as const, content, toolCalls: ran.calls }, ...ran.results];
  if (resumed === undefined) await turn.save(...messages);
  else if (!await turn.resolve(resumed.resolve, ...messages)) throw noPendingApproval(turn.key.sessionId);
  return true;
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
