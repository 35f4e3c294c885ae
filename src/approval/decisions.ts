/**
 * The user's decisions on tool calls: which calls of a reply wait for them, why a call must not run, and how
 * decisions sent to resume a waiting turn are checked. The loop pauses and resumes; this module only decides.
 * @module
 */
import { type ApprovalPolicy, AUTO_POLICY, decide } from "./policy.ts";
import { SessionError } from "../errors.ts";
import { quotedToolName } from "../tools/registry.ts";
import type { ApprovalCall, ToolCall } from "../types.ts";
import type { PendingStep } from "../store/store.ts";

/** The user's word on one call. */
export type Decision = "approve" | "deny";

/** The tool result of a call the user denied. */
export const DENIED_BY_USER = "denied by the user";

/** What a pending step holds that the decisions are checked against: its calls, and the ids of those asked. */
export type WaitingCalls = Pick<PendingStep, "toolCalls" | "asked">;

/** The error of decisions sent for a session whose turn waits for none. */
export function noPendingApproval(sessionId: string): SessionError {
  return new SessionError(
    `Cannot resume: session "${sessionId}" has no turn waiting for approval`,
    "no_pending_approval",
  );
}

/**
 * Ids of the calls that wait for the user: the policy says `ask` and the user has not allowed the tool
 * (`allowed`: the tools the user said "always" to).
 */
export function askedCalls(
  calls: readonly ToolCall[],
  policy: ApprovalPolicy = AUTO_POLICY,
  allowed?: ReadonlySet<string>,
): string[] {
  return calls.filter((call) =>
    call.problem === undefined && decide(policy, call.name) === "ask" && !allowed?.has(call.name)
  ).map((call) => call.id);
}

/**
 * Why a call must not run: the user denied it, or the policy does. A call with a decision follows it;
 * others follow the policy (`ask` without a decision runs: only a resumed step has such calls).
 */
export function refusalFor(
  policy: ApprovalPolicy = AUTO_POLICY,
  decisions: ReadonlyMap<string, Decision> = new Map(),
): (call: ToolCall) => string | null {
  return (call) => {
    const decision = decisions.get(call.id);
    if (decision !== undefined) return decision === "deny" ? DENIED_BY_USER : null;
    if (decide(policy, call.name) !== "deny") return null;
    const name = quotedToolName(call.name);
    return `Cannot run tool ${name}: the approval policy denies it; do not call it again`;
  };
}

/** The calls of a pending step that wait for a decision, as events and the API show them. */
export function approvalCalls(pending: WaitingCalls): ApprovalCall[] {
  return pending.toolCalls.filter((call) => pending.asked.includes(call.id))
    .map(({ id, name, arguments: args }) => ({ id, name, arguments: args }));
}

/** The answer of a turn that pauses for `calls`: which tools wait, and the three places to decide. */
export function waitingAnswer(calls: readonly ApprovalCall[], sessionId: string): string {
  const names = [...new Set(calls.map((call) => call.name))].join(", ");
  const where = `in chat, on the web page or with POST /v1/sessions/${sessionId}/approvals`;
  return `Waiting for your approval to run ${names}: approve or deny ${where}.`;
}

/**
 * `decisions` as a map, checked against the pending step: every waiting call decided, with "approve" or
 * "deny", and no other call named. `TypeError` saying which entry is wrong.
 */
export function checkDecisions(pending: WaitingCalls, decisions: unknown): Map<string, Decision> {
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
