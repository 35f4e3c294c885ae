/**
 * Queueing a turn on a session, the one way every surface runs one (chat, the sessions API, the OpenAI
 * route, the MCP server): what it asks checked against the session (a retry needs an unanswered message, decisions a
 * waiting turn, a new message none), the user's daily quota checked, the run's id taken, then the turn run
 * in the session's queue and under its lease, stopped by the client, a cancel or the shutdown; and the
 * cancel of a running turn, wherever it runs.
 * @module
 */
import { approvalPending, nothingToRetry, type TurnStore, unansweredMessage } from "../agent/agent.ts";
import { type Agent, type RunOptions, runTurn, type TurnInput } from "../agent/loop.ts";
import type { TurnReads } from "../agent/journal.ts";
import { checkDecisions, noPendingApproval } from "../approval/decisions.ts";
import { SessionError } from "../errors.ts";
import { type EventSink, isBackgroundEvent } from "../events.ts";
import type { Session, UsageStore } from "../store/store.ts";
import type { TracePages } from "../trace/shared_trace.ts";
import type { TurnResult } from "../types.ts";
import { checkDailyQuota } from "./quota.ts";
import type { SessionRunner, SessionRunOptions } from "./runner.ts";

/** What a client sees live of a run, never traced: answer text as it streams, reasoning's arrival. */
export type LiveView = Pick<RunOptions, "onDelta" | "onReasoning">;

/**
 * Runs a prepared turn, reporting to `emit` and, as the answer streams, to `live`; `runId` is the id the
 * run will have, known before it starts.
 */
export type QueuedTurn =
  & ((emit: EventSink, live?: LiveView) => Promise<TurnResult>)
  & { readonly runId: string };

/** Options of {@linkcode queueTurn}. */
export interface QueueTurnOptions extends Pick<RunOptions, "allowed">, Pick<SessionRunOptions, "onWait"> {
  /** What runs the turn. @default {deps.agent} */
  agent?: Agent;
  /**
   * Whether the client may go and come back ({@linkcode resumable}): then its disconnect does not abort the
   * turn; a cancel, the shutdown or a lost lease still do. @default {false}
   */
  resumable?: boolean;
  /**
   * A new message that is the session's unanswered one sent again (an API client resending after a failure)
   * retries it rather than asking twice. @default {false}
   */
  retryIfResent?: boolean;
  /**
   * Where the turn reads and writes its session when not in `deps.store` (a request's private session, see
   * `request_session.ts`; the user's memory is still recalled from `deps.store`): then it runs in the
   * session's queue but under no lease, being this request's alone. @default {the session in `deps.store`}
   */
  session?: Pick<RunOptions, "reads" | "journal">;
}

/** What {@linkcode queueTurn} runs a turn with: chat's, the HTTP handler's, or the MCP server's over stdio. */
export interface TurnDeps {
  /** What runs turns. */
  agent: Agent;
  /** Where the sessions are kept, and the user's memory and token counts. */
  store: TurnStore & Pick<UsageStore, "userUsage">;
  /**
   * Runs every turn of a session: in the session's queue (refused past its bounds), then under its lease when
   * it has leases, so two servers on one database never interleave a session.
   */
  sessions: SessionRunner;
  /**
   * Tokens a user may spend per UTC day (AGENT_USER_DAILY_TOKENS), prompt + completion with cached prompt
   * tokens included, counted in the store; past them no turn starts. @default {null} (no quota)
   */
  dailyTokens?: number | null;
  /** Aborts every running turn when the shutdown grace period is over. @default {never} */
  shutdownSignal?: AbortSignal;
}

/**
 * `input` (a new message, a retry or decisions on a waiting turn) ready to run on `agent` through the
 * session runner: first in its session's queue, then under its lease (unless `options.session` is a request's
 * private session, this request's alone); aborted when `signal` aborts, the client's (unless resumable), when
 * it is cancelled (`POST …/cancel`, by its run id) or when the shutdown grace period ends. Its run id is taken
 * now (a resumed run keeps the waiting step's). Throws now, while a response can still carry its status, what
 * refuses the turn: a `SessionError` (a new message while a turn waits for approval, nothing to retry, no
 * turn waiting or decisions that do not match its calls: `invalid_decisions`), the user's spent daily quota
 * (`QuotaExceededError`) or the queue's refusal (`QueueFullError`).
 */
export async function queueTurn(
  signal: AbortSignal,
  input: TurnInput,
  deps: TurnDeps,
  options: QueueTurnOptions = {},
): Promise<QueuedTurn> {
  const { agent: given = deps.agent, resumable = false, session = {}, retryIfResent = false } = options;
  const { allowed, onWait } = options;
  const key = { userId: input.userId, sessionId: input.sessionId };
  const leased = options.session === undefined;
  const { input: asked, waiting } = await checkInput(input, session.reads ?? deps.store, retryIfResent);
  const now = deps.agent.now ?? (() => new Date());
  await checkDailyQuota(deps.store, input.userId, deps.dailyTokens ?? null, now);
  const full = deps.sessions.rejection(key);
  if (full !== null) throw full;
  // Taken before the turn starts, so the response's headers can name the run a client may come back to.
  const runId = waiting ?? (given.newId ?? (() => crypto.randomUUID()))();
  const agent = { ...given, newId: () => runId };
  const { shutdownSignal = new AbortController().signal } = deps;
  const stop = resumable ? shutdownSignal : AbortSignal.any([signal, shutdownSignal]);
  const run = (emit: EventSink, live: LiveView = {}) => {
    const storage = { store: deps.store, ...session };
    const work = (held: AbortSignal) =>
      runTurn(asked, agent, { ...live, ...storage, allowed, emit, signal: held });
    return deps.sessions.run(key, work, { signal: stop, leased, id: runId, onWait });
  };
  return Object.assign(run, { runId });
}

/**
 * `input` checked against its session as stored, before anything runs (the turn checks again when it opens,
 * in the session's queue): the input to run (a resent unanswered message as its retry, with
 * `retryIfResent`) and, for decisions, the run id of the waiting step.
 */
async function checkInput(
  input: TurnInput,
  reads: TurnReads,
  retryIfResent: boolean,
): Promise<{ input: TurnInput; waiting: string | null }> {
  const key = { userId: input.userId, sessionId: input.sessionId };
  const pending = await reads.pendingStep(key);
  if (input.decisions !== undefined) {
    if (pending === null) throw noPendingApproval(key.sessionId);
    try {
      checkDecisions(pending, input.decisions);
    } catch (error) {
      if (!(error instanceof TypeError)) throw error;
      throw new SessionError(error.message, "invalid_decisions");
    }
    return { input, waiting: pending.runId };
  }
  if (pending !== null) throw approvalPending(key.sessionId);
  if (!input.retry && !retryIfResent) return { input, waiting: null };
  const unanswered = unansweredMessage(await reads.messages(key));
  if (input.retry && unanswered === null) throw nothingToRetry(key.sessionId);
  const retry = input.retry === true || unanswered?.content === input.message;
  return { input: { ...input, retry }, waiting: null };
}

/**
 * Cancels the running turn of `session` (only run `runId` when given), taken back as any aborted turn is, and
 * resolves to its run id, or null when none runs. In this process its signal aborts at once; in another (by
 * the session's newest event in `trace`, unfinished, and its lease), the cancel goes through the lease, which
 * that process renews every third of its time and then sees the request.
 */
export async function cancelTurn(
  session: Session,
  runId: string | undefined,
  deps: { sessions: SessionRunner; trace: Pick<TracePages, "latest"> | null },
): Promise<string | null> {
  const key = { userId: session.userId, sessionId: session.id };
  const here = deps.sessions.cancel(key, runId);
  if (here !== null) return here;
  const { userId, id: sessionId, createdAt: since } = session;
  const latest = deps.trace === null ? null : await deps.trace.latest({ userId, sessionId, since });
  // Unfinished: anything but the run's end or what follows it.
  const running = latest !== null && latest.event !== "run_end" && !isBackgroundEvent(latest);
  if (!running || (runId !== undefined && latest.run_id !== runId)) return null;
  return await deps.sessions.cancelElsewhere(key) ? String(latest.run_id) : null;
}
