/**
 * `POST /v1/sessions/{id}/cancel`: stops the session's running turn wherever it runs (the session layer's
 * {@linkcode cancelTurn}), taken back as any aborted turn is.
 * @module
 */
import { traceTableOf } from "../store/open.ts";
import { type Session, validateId } from "../store/store.ts";
import { cancelTurn } from "../session/turn.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";

/**
 * Cancels the running turn of the caller's own `session` (only run `?run_id=` when given): 202
 * `{session_id, run_id}` once the cancel is on its way (the run's stream then ends with its `error` event and
 * `run_end`, outcome `aborted`); 409 `no_running_turn` when none runs, here or in another process.
 */
export async function handleCancel(request: Request, session: Session, deps: HandlerDeps): Promise<Response> {
  const param = new URL(request.url).searchParams.get("run_id");
  const runId = param === null ? undefined : validateId(param, "run id");
  const trace = deps.trace ?? traceTableOf(deps.store);
  const cancelled = await cancelTurn(session, runId, { sessions: deps.sessions, trace });
  if (cancelled !== null) {
    return Response.json({ session_id: session.id, run_id: cancelled }, { status: 202 });
  }
  const which = runId === undefined ? "no turn" : `no turn of run "${runId}"`;
  throw new HttpError(409, "no_running_turn", `Cannot cancel: session "${session.id}" has ${which} running`);
}
