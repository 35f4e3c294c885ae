/**
 * One turn's record: the session it works on, the ids it stamps on what it stores, the events it emits, its
 * usage and steps, and its result. It reads the store to open and never writes to it: the loop does, where
 * it can be seen.
 * @module
 */
import { storeJournal, type TurnJournal } from "./journal.ts";
import type { EventSink, RunEventData, RunEventName } from "../events.ts";
import { checkDecisions, type Decision, noPendingApproval } from "../approval/decisions.ts";
import { TurnMemory } from "../memory/turn_memory.ts";
import type { MemoryState } from "../memory/compact.ts";
import type { Calibration, PendingStep, SessionKey } from "../store/store.ts";
import { countTokens } from "../memory/plan.ts";
import { costOf } from "../prices.ts";
import type {
  ChatReply,
  Message,
  ResponseFormat,
  StoredMessage,
  ToolSchema,
  TurnFailure,
  TurnOutcome,
  TurnResult,
  TurnToolCall,
  Usage,
  UsageEntry,
} from "../types.ts";
import { buildContext } from "./context.ts";
import { formatInstructions } from "./response_format.ts";
import {
  type Agent,
  approvalPending,
  nothingToRetry,
  type RunOptions,
  type TurnInput,
  type TurnStore,
  unansweredMessage,
  usageData,
} from "./agent.ts";

/** The step a resumed turn takes up first: the paused one, with the user's decisions. */
export interface PausedStep {
  pending: PendingStep;
  decisions: ReadonlyMap<string, Decision>;
}

/** A running turn: open it with {@linkcode openTurn}, end it with {@linkcode Turn.end}. */
export class Turn {
  readonly key: SessionKey;
  readonly runId: string;
  readonly tools: readonly ToolSchema[];
  /** The client's instructions of this turn (see {@linkcode TurnInput}). */
  readonly instructions: string | null;
  /** What the final answer must be (see {@linkcode TurnInput}), or null: plain text. */
  readonly responseFormat: ResponseFormat | null;
  /** The system message saying the response format, or null without one. */
  readonly formatText: string | null;
  readonly memory: TurnMemory;
  /** Where the turn's writes go: `run.journal`, else the session in `run.store`. */
  readonly journal: TurnJournal;
  readonly calls: TurnToolCall[] = [];
  readonly usage: Usage = {
    promptTokens: null,
    completionTokens: null,
    totalTokens: null,
    cachedTokens: null,
  };
  /**
   * Tokens the turn's model calls spent, prompt + completion with cached prompt tokens included, as reported,
   * else estimated: what its budget counts.
   */
  spent = 0;
  /** The model calls' tokens not stored yet: the next write of the session carries them. */
  readonly #unstored: UsageEntry[] = [];
  /** Every model call's tokens in this run, for its cost. */
  readonly #counted: UsageEntry[] = [];
  /** Model calls that ended, with a reply or a failure (an aborted one does not count): `run_end`'s steps. */
  steps: number;
  #seq: number;
  /** Ids of what this run stored: an abort before the answer takes exactly these back. */
  readonly saved: string[] = [];

  constructor(
    readonly agent: Agent,
    readonly run: RunOptions,
    session: MemoryState & { calibration?: Calibration | null },
    readonly number: number,
    options: { instructions?: string | null; responseFormat?: ResponseFormat | null; resumed?: PendingStep } =
      {},
  ) {
    const { instructions = null, responseFormat = null, resumed } = options;
    this.key = session.key;
    this.journal = run.journal ?? storeJournal(storeOf(run), session.key);
    this.instructions = instructions;
    this.responseFormat = responseFormat;
    this.formatText = responseFormat === null
      ? null
      : formatInstructions(responseFormat, agent.responseFormatMode ?? "native");
    this.runId = resumed?.runId ?? (agent.newId ?? (() => crypto.randomUUID()))();
    this.#seq = resumed?.seq ?? 0;
    this.steps = resumed === undefined ? 0 : resumed.step + 1;
    this.tools = agent.tools.schemas();
    const system = buildContext([], { instructions, responseFormat: this.formatText });
    const fixed = { system, tools: this.tools };
    const journal = this.journal;
    const storage = {
      reads: run.reads ?? storeOf(run),
      kept: {
        applyCompaction: (_key: SessionKey, ...write: Parameters<TurnJournal["compact"]>) =>
          journal.compact(...write),
      },
      recall: agent.userMemory?.store ?? run.store ?? null,
    };
    this.memory = new TurnMemory(session, fixed, agent, () => this.now(), storage);
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

  /**
   * Adds a model call's tokens to what the turn spent: its reported total (else prompt + completion), cached
   * prompt tokens included, or when none was reported, `requestTokens` (the request's estimate) plus the
   * reply's estimate. Returns the call's counts as the store keeps them: its cached tokens and those written to
   * the cache as reported (0 when not, or estimated), the two together never more than its prompt tokens.
   */
  spend(reply: ChatReply, requestTokens: number): UsageEntry {
    this.addUsage(reply.usage);
    const { usage } = reply;
    const reported = reportedTokens(usage);
    // The reply's text is counted only when the provider reported nothing.
    const text = () =>
      (reply.content ?? "") + reply.toolCalls.map((call) => call.name + call.arguments).join("");
    const [prompt, completion] = reported === null || usage === null
      ? [requestTokens, countTokens(text())]
      : [usage.promptTokens ?? reported - (usage.completionTokens ?? 0), usage.completionTokens ?? 0];
    if (reported === null) this.spent += prompt + completion;
    const promptTokens = Math.max(0, prompt);
    const cached = Math.min(promptTokens, Math.max(0, reported === null ? 0 : usage?.cachedTokens ?? 0));
    const written = reported === null ? 0 : usage?.cacheWriteTokens ?? 0;
    const entry = {
      day: this.now().toISOString().slice(0, 10),
      model: reply.model === "" ? "unknown" : reply.model,
      promptTokens,
      cachedTokens: cached,
      cacheWriteTokens: Math.min(promptTokens - cached, Math.max(0, written)),
      completionTokens: completion,
      calls: 1,
      estimatedCalls: reported === null ? 1 : 0,
    };
    this.#unstored.push(entry);
    this.#counted.push(entry);
    return entry;
  }

  /** Every call's tokens not stored yet, taken off the list: they go with the turn's next write. */
  unstoredUsage(): UsageEntry[] {
    return this.#unstored.splice(0);
  }

  /** Adds a model call's token counts to the turn's (and what it reported to what the turn spent). */
  addUsage(usage: Usage | null): void {
    if (usage === null) return;
    this.spent += reportedTokens(usage) ?? 0;
    for (const key of ["promptTokens", "completionTokens", "totalTokens", "cachedTokens"] as const) {
      const value = usage[key];
      if (value !== null) this.usage[key] = (this.usage[key] ?? 0) + value;
    }
    // Absent unless a call reported it, so a turn of a provider without cache writes reads as before.
    const written = usage.cacheWriteTokens ?? null;
    if (written !== null) this.usage.cacheWriteTokens = (this.usage.cacheWriteTokens ?? 0) + written;
  }

  /**
   * `messages` as this run stores them: ids in run order, the clock's time, frozen (the same objects go into
   * every request of the turn, so the request body reuses their JSON; tool calls are copied first, so the
   * model client's own objects are never frozen under it).
   */
  stamp(messages: readonly Message[]): StoredMessage[] {
    return messages.map((m) => {
      const calls = m.toolCalls?.map((call) => Object.freeze({ ...call }));
      const message: StoredMessage = {
        ...m,
        ...(calls === undefined ? {} : { toolCalls: Object.freeze(calls) as StoredMessage["toolCalls"] }),
        id: `${this.runId}:${this.#seq++}`,
        createdAt: this.now().toISOString(),
      };
      return Object.freeze(message);
    });
  }

  /**
   * The store took `messages`: the next request carries them, and an abort takes them back, unless `kept`
   * (an approved step's calls: once stored they may have started, and stay).
   */
  stored(messages: readonly StoredMessage[], options: { kept?: boolean } = {}): void {
    this.memory.added(messages);
    if (options.kept !== true) this.saved.push(...messages.map((m) => m.id));
  }

  /** Ends the turn with `outcome`: emits `run_end` and returns the result. */
  end(outcome: TurnOutcome, answer: string, failure?: TurnFailure): TurnResult {
    const { runId, number: turn, calls: toolCalls, usage, steps } = this;
    const { prices } = this.agent;
    const cost = prices === undefined || prices.size === 0 ? {} : { cost_usd: costOf(prices, this.#counted) };
    this.event("run_end", null, {
      outcome,
      steps,
      tool_calls: toolCalls.length,
      usage: usageData(usage),
      ...cost,
    });
    const result: TurnResult = {
      sessionId: this.key.sessionId,
      runId,
      turn,
      outcome,
      answer,
      toolCalls,
      usage,
    };
    return failure === undefined ? result : { ...result, failure };
  }
}

/** The tokens a call reported: its total, else prompt + completion, else null (none reported). */
function reportedTokens(usage: Usage | null): number | null {
  if (usage === null) return null;
  if (usage.totalTokens !== null) return usage.totalTokens;
  if (usage.promptTokens === null && usage.completionTokens === null) return null;
  return (usage.promptTokens ?? 0) + (usage.completionTokens ?? 0);
}

/**
 * Opens the turn `input` asks for, reading the session: a new message (the session created if new, the
 * question returned for the caller to store), a retry of its unanswered one, or the resumption of its turn
 * that waits for approval (with the paused step). Emits `run_start`, except on a resumption (the same run).
 * `SessionError` when there is nothing to retry or resume or a turn waits for approval, `TypeError` for an
 * empty message or decisions that do not match the waiting calls.
 */
export async function openTurn(
  input: TurnInput,
  agent: Agent,
  run: RunOptions,
): Promise<{ turn: Turn; paused: PausedStep | null; question: Message | null }> {
  const { message, retry = false, decisions } = input;
  const key = { userId: input.userId, sessionId: input.sessionId };
  const store = run.reads ?? storeOf(run);
  if (decisions !== undefined) {
    const pending = await store.pendingStep(key);
    if (pending === null) throw noPendingApproval(key.sessionId);
    const checked = checkDecisions(pending, decisions);
    const session = await store.get(key);
    const history = await store.messages(key);
    const state = { key, summary: session?.summary ?? null, history, calibration: session?.calibration };
    const turn = new Turn(agent, run, state, pending.turn, { resumed: pending });
    return { turn, paused: { pending, decisions: checked }, question: null };
  }
  if (!retry && (typeof message !== "string" || message.trim() === "")) {
    throw new TypeError("Cannot run a turn: the message must be a non-empty string");
  }
  // A retry creates nothing: a session that does not exist has nothing to retry.
  const session = retry ? await store.get(key) : await store.getOrCreate(key);
  const history = session === null ? [] : await store.messages(key);
  const question = retry ? unansweredMessage(history)?.content ?? null : message!;
  if (session === null || question === null) throw nothingToRetry(key.sessionId);
  if (await store.pendingStep(key) !== null) throw approvalPending(key.sessionId);
  const number = retry ? session.turnCount : session.turnCount + 1;
  const state = { key, summary: session.summary, history, calibration: session.calibration };
  const { instructions, responseFormat } = input;
  const turn = new Turn(agent, run, state, number, { instructions, responseFormat });
  turn.event("run_start", null, {
    user_id: key.userId,
    message: question,
    ...(retry ? { retry: true } : {}),
  });
  // A retry's question is stored already; a new one is for the caller to store.
  return { turn, paused: null, question: retry ? null : { role: "user", content: question } };
}

/** The run's store; a `TypeError` when the run has none and not both its reads and journal. */
function storeOf(run: RunOptions): TurnStore {
  if (run.store !== undefined) return run.store;
  throw new TypeError("Cannot run a turn: the run has no store, nor both its reads and its journal");
}
