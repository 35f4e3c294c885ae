/**
 * Approval of tool calls: which calls of a reply wait for the user, how a turn pauses on them (the step
 * stored apart, never as an assistant message without results) and how the user's decisions are checked and
 * applied when the same run resumes.
 * @module
 */
import { AUTO_POLICY, decide } from "../approval/policy.ts";
import { SessionError } from "../errors.ts";
import { quotedToolName } from "../tools/registry.ts";
import type { PendingStep } from "../store/store.ts";
import type { ApprovalCall, ToolCall, TurnResult } from "../types.ts";
import type { Agent, RunOptions } from "./agent.ts";
import type { Turn } from "./turn.ts";

/** The user's word on one call. */
export type Decision = "approve" | "deny";

/** The tool result of a call the user denied. */
export const DENIED_BY_USER = "denied by the user";

/** The error of decisions sent for a session whose turn waits for none. */
export function noPendingApproval(sessionId: string): SessionError {
  return new SessionError(
    `Cannot resume: session "${sessionId}" has no turn waiting for approval`,
    "no_pending_approval",
  );
}

/** Ids of the calls that wait for the user: the policy says `ask` and the user has not allowed the tool. */
export function askedCalls(calls: readonly ToolCall[], agent: Agent, run: RunOptions): string[] {
  const policy = agent.approval ?? AUTO_POLICY;
  return calls.filter((call) =>
    call.problem === undefined && decide(policy, call.name) === "ask" && !run.allowed?.has(call.name)
  ).map((call) => call.id);
}

/**
 * Why a call must not run: the user denied it, or the policy does. A call with a decision follows it;
 * others follow the policy (`ask` without a decision runs: only a resumed step has such calls).
 */
export function refusalFor(
  agent: Agent,
  decisions: ReadonlyMap<string, Decision> = new Map(),
): (call: ToolCall) => string | null {
  const policy = agent.approval ?? AUTO_POLICY;
  return (call) => {
    const decision = decisions.get(call.id);
    if (decision !== undefined) return decision === "deny" ? DENIED_BY_USER : null;
    if (decide(policy, call.name) !== "deny") return null;
    return `Cannot run tool ${
      quotedToolName(call.name)
    }: the approval policy denies it; do not call it again`;
  };
}

/** The calls of a pending step that wait for a decision, as events and the API show them. */
export function approvalCalls(pending: Pick<PendingStep, "toolCalls" | "asked">): ApprovalCall[] {
  return pending.toolCalls.filter((call) => pending.asked.includes(call.id))
    .map(({ id, name, arguments: args }) => ({ id, name, arguments: args }));
}

/**
 * Pauses the turn at `step`: stores the reply's content and calls (none run) as the session's pending step,
 * emits `approval_requested` and ends the run with `awaiting_approval`.
 */
export async function pause(
  turn: Turn,
  content: string | null,
  toolCalls: ToolCall[],
  asked: string[],
  step: number,
): Promise<TurnResult> {
  const { runId, number, seq } = turn;
  const createdAt = turn.now().toISOString();
  const pending = { runId, turn: number, step, seq, content, toolCalls, asked, createdAt };
  await turn.agent.store.savePending(turn.key, pending);
  const calls = approvalCalls(pending);
  turn.event("approval_requested", step, { calls });
  const names = [...new Set(calls.map((call) => call.name))].join(", ");
  const where = `in chat, on the web page or with POST /v1/sessions/${turn.key.sessionId}/approvals`;
  const answer = `Waiting for your approval to run ${names}: approve or deny ${where}.`;
  const result = turn.finish("awaiting_approval", answer, step + 1);
  return { ...result, approval: { calls } };
}

/**
 * `decisions` as a map, checked against the pending step: every waiting call decided, with "approve" or
 * "deny", and no other call named. `TypeError` saying which entry is wrong.
 */
export function checkDecisions(pending: PendingStep, decisions: unknown): Map<string, Decision> {
  if (typeof decisions !== "object" || decisions === null || Array.isArray(decisions)) {
    throw new TypeError('Cannot resume: "decisions" must be an object of call ids to "approve" or "deny"');
  }
  const checked = new Map<string, Decision>();
  for (const [id, decision] of Object.entries(decisions)) {
    if (!pending.asked.includes(id)) {
      throw new TypeError(`Cannot resume: call "${id}" does not wait for approval`);
    }
    if (decision !== "approve" && decision !== "deny") {
      throw new TypeError(`Cannot resume: the decision on call "${id}" must be "approve" or "deny"`);
    }
    checked.set(id, decision);
  }
  const missing = pending.asked.filter((id) => !checked.has(id));
  if (missing.length > 0) {
    throw new TypeError(
      `Cannot resume: no decision on call${missing.length > 1 ? "s" : ""} ${missing.join(", ")}`,
    );
  }
  return checked;
}
