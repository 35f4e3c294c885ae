/**
 * `POST /v1/sessions/{id}/approvals`: the user's decisions on the calls a paused turn waits for. The same run
 * resumes, answered like a turn (JSON, or SSE with `Accept: text/event-stream`).
 * @module
 */
import { checkDecisions, noPendingApproval } from "../approval/decisions.ts";
import type { SessionKey } from "../store/store.ts";
import { readJsonBody } from "./body.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { respondTurn, resumable } from "./turn_route.ts";
import { queueTurn } from "../session/turn.ts";

/**
 * Resumes the turn of `key` that waits for approval. Checked before anything runs: the body (400), that a
 * turn waits (409 `no_pending_approval`), and that the decisions name exactly its waiting calls (400).
 */
export async function handleApproval(
  request: Request,
  key: SessionKey,
  deps: HandlerDeps,
): Promise<Response> {
  const body = await readJsonBody(request, { maxBytes: deps.maxBodyBytes, signal: request.signal });
  const invalid = (why: string) => new HttpError(400, "invalid_body", why);
  if (typeof body !== "object" || body === null || Array.isArray(body) || !Object.hasOwn(body, "decisions")) {
    throw invalid('Cannot resume: the body must be a JSON object with "decisions"');
  }
  const decisions = (body as { decisions: unknown }).decisions;
  const pending = await deps.agent.store.pendingStep(key);
  if (pending === null) throw noPendingApproval(key.sessionId);
  try {
    checkDecisions(pending, decisions);
  } catch (error) {
    if (error instanceof TypeError) throw invalid(error.message);
    throw error;
  }
  const input = { ...key, decisions: decisions as Record<string, "approve" | "deny"> };
  const run = await queueTurn(request.signal, input, deps, {
    resumable: resumable(request),
    runId: pending.runId,
  });
  return await respondTurn(request, run, deps);
}
