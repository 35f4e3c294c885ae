/**
 * `POST /v1/sessions/{id}/approvals`: the user's decisions on the calls a paused turn waits for. The same run
 * resumes, answered like a turn (JSON, or SSE with `Accept: text/event-stream`).
 * @module
 */
import type { Decision } from "../approval/decisions.ts";
import type { SessionKey } from "../store/store.ts";
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { respondTurn, resumable } from "./turn_route.ts";
import { queueTurn } from "../session/turn.ts";

/**
 * Resumes the turn of `key` that waits for approval. Checked before anything runs: the body (400), then by
 * the session layer that a turn waits (409 `no_pending_approval`) and that the decisions name exactly its
 * waiting calls (400 `invalid_body`).
 */
export async function handleApproval(
  request: Request,
  key: SessionKey,
  deps: HandlerDeps,
): Promise<Response> {
  const body = await readJsonBody(request, { maxBytes: deps.maxBodyBytes });
  if (typeof body !== "object" || body === null || Array.isArray(body) || !Object.hasOwn(body, "decisions")) {
    throw new HttpError(
      400,
      "invalid_body",
      'Cannot resume: the body must be a JSON object with "decisions"',
    );
  }
  const decisions = (body as { decisions: Record<string, Decision> }).decisions;
  const run = await queueTurn(request.signal, { ...key, decisions }, deps, { resumable: resumable(request) });
  return await respondTurn(request, run, deps);
}
