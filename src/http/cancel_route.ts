/**
 * `POST /v1/sessions/{id}/cancel`: stops the session's running turn wherever it runs, taken back as any
 * aborted turn is. In this process its signal aborts at once; in another, the cancel goes through the
 * session's lease, which that process renews every third of its time and then sees the request.
 * @module
 */
import { isBackgroundEvent } from "../events.ts";
import { traceTableOf } from "../store/open.ts";
import { type Session, validateId } from "../store/store.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";

/** Whether `event`, a session's newest, leaves its run unfinished: anything but its end or what follows it. */
function running(event: Record<string, unknown> | null): event is Record<string, unknown> {
  if (event === null || event.event === "run_end") return false;
  return !isBackgroundEvent(event);
}

/**
 * Cancels the running turn of the caller's own `session` (only run `?run_id=` when given): 202
 * `{session_id, run_id}` once the cancel is on its way (the run's stream then ends with its `error` event and
 * `run_end`, outcome `aborted`); 409 `no_running_turn` when none runs, here or (by the trace table and the
 * session's lease) in another process.
 */
export async function handleCancel(request: Request, session: Session, deps: HandlerDeps): Promise<Response> {
  const param = new URL(request.url).searchParams.get("run_id");
  const runId = param === null ? undefined : validateId(param, "run id");
  const key = { userId: session.userId, sessionId: session.id };
  const accepted = (run_id: string) => Response.json({ session_id: session.id, run_id }, { status: 202 });
  const here = deps.sessions.cancel(key, runId);
  if (here !== null) return accepted(here);
  // Not here: the newest event of the session says which run is unfinished; its holder gets the request.
  const trace = deps.trace ?? traceTableOf(deps.agent.store);
  const { userId, id: sessionId, createdAt: since } = session;
  const latest = trace === null ? null : await trace.latest({ userId, sessionId, since });
  const target = running(latest) && (runId === undefined || latest.run_id === runId) ? latest : null;
  if (target !== null && await deps.sessions.cancelElsewhere(key)) return accepted(String(target.run_id));
  const which = runId === undefined ? "no turn" : `no turn of run "${runId}"`;
  throw new HttpError(409, "no_running_turn", `Cannot cancel: session "${session.id}" has ${which} running`);
}
