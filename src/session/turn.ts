/**
 * Queueing a turn on a session, the one way every surface runs one (the sessions API, the OpenAI route, the
 * MCP server): the user's daily quota checked, the run's id taken, then the turn run in the session's queue
 * and under its lease, stopped by the client, a cancel or the shutdown.
 * @module
 */
import { type Agent, type RunOptions, runTurn, type TurnInput } from "../agent/loop.ts";
import type { EventSink } from "../events.ts";
import type { TurnResult } from "../types.ts";
import { checkDailyQuota } from "./quota.ts";
import type { SessionRunner } from "./runner.ts";

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
export interface QueueTurnOptions {
  /** What runs the turn. @default {deps.agent} */
  agent?: Agent;
  /**
   * Whether the client may go and come back ({@linkcode resumable}): then its disconnect does not abort the
   * turn; a cancel, the shutdown or a lost lease still do. @default {false}
   */
  resumable?: boolean;
  /** The run's id when `input` resumes one (decisions): the waiting step's. Required then. */
  runId?: string;
  /**
   * Where the turn reads and writes its session when not in the agent's store (a request's private session,
   * see `request_session.ts`): then it runs in the session's queue but under no lease, being this request's
   * alone. @default {the session in the agent's store}
   */
  session?: Pick<RunOptions, "reads" | "journal">;
}

/** What {@linkcode queueTurn} runs a turn with: the HTTP handler's, or the MCP server's over stdio. */
export interface TurnDeps {
  /** What runs turns; its store keeps the sessions. */
  agent: Agent;
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
  /** Aborts every running turn when the shutdown grace period is over. */
  shutdownSignal: AbortSignal;
}

/**
 * `input` (a new message, a retry or decisions on a waiting turn) ready to run on `agent` through the
 * session runner: first in its session's queue, then under its lease (unless `options.session` is a request's
 * private session, this request's alone); aborted when `signal` aborts, the client's (unless resumable), when
 * it is cancelled (`POST …/cancel`, by its run id) or when the shutdown grace period ends. Its run id is taken
 * now (a resumed run keeps its own). Throws the user's spent daily quota (`QuotaExceededError`) or the queue's
 * refusal (`QueueFullError`) now, while a response can still carry its status.
 */
export async function queueTurn(
  signal: AbortSignal,
  input: TurnInput,
  deps: TurnDeps,
  options: QueueTurnOptions = {},
): Promise<QueuedTurn> {
  const { agent: given = deps.agent, resumable = false, session = {} } = options;
  const key = { userId: input.userId, sessionId: input.sessionId };
  const leased = options.session === undefined;
  const now = (deps.agent.now ?? (() => new Date()))();
  await checkDailyQuota(deps.agent.store, input.userId, deps.dailyTokens ?? null, now);
  const full = deps.sessions.rejection(key);
  if (full !== null) throw full;
  // Taken before the turn starts, so the response's headers can name the run a client may come back to.
  const runId = input.decisions === undefined
    ? (given.newId ?? (() => crypto.randomUUID()))()
    : options.runId!;
  const agent = { ...given, newId: () => runId };
  const stop = resumable ? deps.shutdownSignal : AbortSignal.any([signal, deps.shutdownSignal]);
  const run = (emit: EventSink, live: LiveView = {}) => {
    const work = (held: AbortSignal) => runTurn(input, agent, { ...live, ...session, emit, signal: held });
    return deps.sessions.run(key, work, { signal: stop, leased, id: runId });
  };
  return Object.assign(run, { runId });
}
