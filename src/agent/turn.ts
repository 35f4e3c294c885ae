/**
 * One turn's state and what it writes: the session it works on, the messages it stores, the events it emits
 * and how it ends. The loop decides; a `Turn` records.
 * @module
 */
import type { EventSink, RunEventData, RunEventName } from "../events.ts";
import { compactIfDue, type CompactionDeps, type MemoryState, requestTokens } from "../memory/compact.ts";
import { defaultCompactBatch, estimateRequestTokens, overTurnLimit } from "../memory/plan.ts";
import type {
  Message,
  StoredMessage,
  ToolSchema,
  TurnOutcome,
  TurnResult,
  TurnToolCall,
  Usage,
} from "../types.ts";
import { buildContext } from "./context.ts";
import type { PendingStep, SessionKey } from "../store/store.ts";
import {
  ABORTED_ANSWER,
  type Agent,
  approvalPending,
  nothingToRetry,
  type RunOptions,
  type TurnInput,
  unansweredMessage,
  usageData,
} from "./agent.ts";

function abortText(signal: AbortSignal | undefined): string {
  const reason = signal?.reason;
  const text = reason instanceof Error ? reason.message : typeof reason === "string" ? reason : "";
  return text === "" ? "the turn was aborted" : `the turn was aborted: ${text}`;
}

/** A running turn. Open it with {@linkcode Turn.open}; end it with one of its closing methods. */
export class Turn {
  readonly agent: Agent;
  readonly run: RunOptions;
  readonly key: SessionKey;
  readonly runId: string;
  readonly number: number;
  readonly tools: readonly ToolSchema[];
  /** The client's instructions of this turn (see {@linkcode TurnInput}). */
  readonly instructions: string | null;
  memory: MemoryState;
  readonly calls: TurnToolCall[] = [];
  readonly usage: Usage = { promptTokens: null, completionTokens: null, totalTokens: null };
  #seq = 0;
  /** What this run stored: an abort before the answer takes exactly these back. */
  #saved: string[] = [];
  /** A failed (or impossible) compaction is not retried within the turn: one summary call per problem. */
  #compacting = true;
  /** Estimated tokens of the next request, kept up to date as messages are saved: no re-count per step. */
  #tokens: number;

  private constructor(
    agent: Agent,
    run: RunOptions,
    key: SessionKey,
    memory: MemoryState,
    number: number,
    instructions: string | null,
    resumed?: { runId: string; seq: number },
  ) {
    this.agent = agent;
    this.run = run;
    this.key = key;
    this.instructions = instructions;
    this.memory = memory;
    this.number = number;
    this.runId = resumed?.runId ?? (agent.newId ?? (() => crypto.randomUUID()))();
    this.#seq = resumed?.seq ?? 0;
    this.tools = agent.tools.schemas();
    this.#tokens = requestTokens(memory, this.#fixed());
  }

  /**
   * Starts the turn: finds (or creates) the session, emits `run_start` and stores the question — or, with
   * `retry`, takes the session's unanswered one. `SessionError` when there is nothing to retry, `TypeError`
   * for an empty message.
   */
  static async open(input: TurnInput, agent: Agent, run: RunOptions): Promise<Turn> {
    const { message, retry = false } = input;
    if (!retry && (typeof message !== "string" || message.trim() === "")) {
      throw new TypeError("Cannot run a turn: the message must be a non-empty string");
    }
    const key = { userId: input.userId, sessionId: input.sessionId };
    const { store } = agent;
    // A retry creates nothing: a session that does not exist has nothing to retry.
    const session = retry ? await store.get(key) : await store.getOrCreate(key);
    const history = session === null ? [] : await store.messages(key);
    const question = retry ? unansweredMessage(history)?.content ?? null : message!;
    if (session === null || question === null) throw nothingToRetry(key.sessionId);
    if (await store.pendingStep(key) !== null) throw approvalPending(key.sessionId);
    const memory = { key, summary: session.summary, history };
    const number = retry ? session.turnCount : session.turnCount + 1;
    const turn = new Turn(agent, run, key, memory, number, input.instructions ?? null);
    turn.event("run_start", null, {
      user_id: key.userId,
      message: question,
      ...(retry ? { retry: true } : {}),
    });
    if (!retry) await turn.save({ role: "user", content: question });
    return turn;
  }

  /**
   * Takes up the run that paused at `pending`, as the same run: its id, turn number and message ids go on.
   * Emits no `run_start`; the caller stores the paused step with {@linkcode Turn.resolve}.
   */
  static async resume(key: SessionKey, pending: PendingStep, agent: Agent, run: RunOptions): Promise<Turn> {
    const session = await agent.store.get(key);
    const history = await agent.store.messages(key);
    const memory = { key, summary: session?.summary ?? null, history };
    const { runId, seq, turn: number } = pending;
    return new Turn(agent, run, key, memory, number, null, { runId, seq });
  }

  /** The number of the next message id: a paused step stores it, so the resumed run goes on from it. */
  get seq(): number {
    return this.#seq;
  }

  /** The current time, from the agent's clock. */
  now(): Date {
    return (this.agent.now ?? (() => new Date()))();
  }

  /** Emits one event of the run (to `emit`, by default the run's). */
  event<N extends RunEventName>(
    name: N,
    step: number | null,
    data: RunEventData[N],
    emit: EventSink = this.run.emit,
  ): void {
    const { sessionId, userId } = this.key;
    emit(
      {
        ts: this.now().toISOString(),
        session_id: sessionId,
        user_id: userId,
        run_id: this.runId,
        turn: this.number,
        event: name,
        step,
        data,
      } as Parameters<EventSink>[0],
    );
  }

  /** Adds a model call's token counts to the turn's. */
  addUsage(usage: Usage | null): void {
    if (usage === null) return;
    for (const key of ["promptTokens", "completionTokens", "totalTokens"] as const) {
      const value = usage[key];
      if (value !== null) this.usage[key] = (this.usage[key] ?? 0) + value;
    }
  }

  /** Stores messages in one transaction, stamped with this run's ids, and adds them to the history. */
  async save(...messages: Message[]): Promise<void> {
    await this.#store(messages, (stamped) => this.agent.store.append(this.key, stamped));
  }

  /**
   * Stores the paused step of run `runId` — its assistant message and every result — and drops the pending
   * row, in one transaction; false (nothing stored) when the step was resolved meanwhile.
   */
  async resolve(runId: string, ...messages: Message[]): Promise<boolean> {
    let resolved = false;
    await this.#store(messages, async (stamped) => {
      resolved = await this.agent.store.resolvePending(this.key, runId, stamped);
      return resolved;
    });
    return resolved;
  }

  async #store(messages: Message[], write: (stamped: StoredMessage[]) => Promise<unknown>): Promise<void> {
    // Frozen: the same objects go into every request of the turn, so the request body can reuse their JSON.
    // The tool calls are copied first, so the model client's own objects are never frozen under it.
    const stamped = messages.map((m) => {
      const calls = m.toolCalls?.map((call) => Object.freeze({ ...call }));
      const message: StoredMessage = {
        ...m,
        ...(calls === undefined ? {} : { toolCalls: Object.freeze(calls) as StoredMessage["toolCalls"] }),
        id: `${this.runId}:${this.#seq++}`,
        createdAt: this.now().toISOString(),
      };
      return Object.freeze(message);
    });
    if (await write(stamped) === false) return;
    this.memory.history.push(...stamped);
    this.#tokens += estimateRequestTokens(stamped);
    this.#saved.push(...stamped.map((m) => m.id));
  }

  /**
   * Before the model is asked: compacts if the request would not fit the token budget (a compaction due by
   * the turn trigger alone waits for {@linkcode compactAfterAnswer}). Never fails the turn.
   */
  async compactIfDue(step: number): Promise<void> {
    if (!this.#compacting || this.#tokens <= this.agent.maxCtxTokens) return;
    const deps = this.#compactionDeps(this.run.signal, { tokensOnly: true });
    const compaction = await compactIfDue(this.memory, this.#fixed(), deps);
    if (compaction === null) return;
    this.event("compact", step, { ...compaction.event, background: false });
    this.addUsage(compaction.usage);
    this.memory = compaction.state;
    this.#compacting = compaction.event.ok;
    if (compaction.event.ok) this.#tokens = compaction.event.tokens_after;
  }

  /**
   * After the answer is stored: starts a compaction due by the turn trigger in the background. It plans on
   * the session as stored when it starts (an earlier compaction or a newer turn may have changed it). Its
   * `compact` event, with its own usage, is this run's and goes to the trace.
   */
  compactAfterAnswer(): void {
    const { store, maxRawTurns, compactBatch = defaultCompactBatch(maxRawTurns), compactions } = this.agent;
    if (!overTurnLimit(this.memory.history, maxRawTurns, compactBatch)) return;
    const key = this.key;
    compactions.start(key, async (emit, signal) => {
      const session = await store.get(key);
      if (session === null) return; // deleted meanwhile
      const state = { key, summary: session.summary, history: await store.messages(key) };
      const compaction = await compactIfDue(state, this.#fixed(), this.#compactionDeps(signal, {}));
      if (compaction === null) return;
      const usage = compaction.usage === null ? null : usageData(compaction.usage);
      this.event("compact", null, { ...compaction.event, background: true, usage }, emit);
    });
  }

  /** What every request of the turn carries besides the history and the summary. */
  #fixed() {
    return { system: buildContext([], { instructions: this.instructions }), tools: this.tools };
  }

  #compactionDeps(signal: AbortSignal | undefined, options: { tokensOnly?: boolean }): CompactionDeps {
    const { store, summarizer, maxRawTurns, maxCtxTokens } = this.agent;
    const { compactBatch = defaultCompactBatch(maxRawTurns) } = this.agent;
    const now = () => this.now();
    return { store, summarizer, maxRawTurns, compactBatch, maxCtxTokens, now, signal, ...options };
  }

  /** Ends the turn with `outcome`: emits `run_end` and returns the result. */
  finish(outcome: TurnOutcome, answer: string, steps: number): TurnResult {
    this.event("run_end", null, {
      outcome,
      steps,
      tool_calls: this.calls.length,
      usage: usageData(this.usage),
    });
    const { runId, number: turn, calls: toolCalls, usage } = this;
    return { sessionId: this.key.sessionId, runId, turn, outcome, answer, toolCalls, usage };
  }

  /** Stores `text` as the answer and ends the turn (`closing` marks a fixed answer the runtime wrote). */
  async answer(step: number, text: string, closing?: "empty" | "max_steps"): Promise<TurnResult> {
    await this.save({ role: "assistant", content: text });
    this.event("answer", step, closing === undefined ? { text } : { text, closing });
    return this.finish(closing ?? "answered", text, step + 1);
  }

  /**
   * Ends an aborted turn: it comes before the answer is stored, so what the turn stored is taken back (its
   * question too, unless a retry's), and the trace's error event says so.
   */
  async abort(step: number, steps: number): Promise<TurnResult> {
    const discarded = await this.agent.store.discardMessages(this.key, this.#saved);
    const message = abortText(this.run.signal);
    this.event("error", step, {
      kind: "aborted",
      status: null,
      retries: 0,
      message,
      discarded_messages: discarded,
    });
    return this.finish("aborted", ABORTED_ANSWER, steps);
  }
}
