/**
 * The words of a turn that ended without an answer, the same on every surface: what stopped it, whether any
 * of it was kept, and what to do, with the surface's own way to retry or cancel. The HTTP errors add their
 * status and code; the MCP server sends them as its tool error.
 * @module
 */
import { failedAnswer } from "../agent/loop.ts";
import { listed } from "../agent/response_format.ts";
import { TurnCancelledError } from "../errors.ts";
import type { TurnFailure, TurnResult } from "../types.ts";

/** How a surface says to retry and to cancel a turn. */
export interface FailureAdvice {
  /** How to retry the turn, as a clause: "retry it with POST …/retry". @default {"retry it"} */
  retry?: string;
  /** Where a cancel was asked, in parentheses after "cancelled": "POST …/cancel". @default {none} */
  cancel?: string;
}

/**
 * The message of `result`, a turn with a failure: cancelled on request or otherwise stopped, its lease lost,
 * an answer that does not match the response format, its deadline passed, else the model's or the store's failure
 * ({@linkcode failedAnswer}).
 */
export function failureMessage(
  result: TurnResult & { failure: TurnFailure },
  advice: FailureAdvice = {},
): string {
  const { failure, runId, sessionId } = result;
  const { kind, cause } = failure;
  if (kind === "aborted" && cause instanceof TurnCancelledError) {
    const where = advice.cancel === undefined ? "" : ` (${advice.cancel})`;
    return `The turn was cancelled${where}; nothing of it was kept`;
  }
  // Stopped otherwise: by the shutdown (its reason says so) or the client's leaving.
  if (kind === "aborted") {
    return cause instanceof Error ? cause.message : "The turn was stopped; nothing of it was kept";
  }
  if (kind === "lease") {
    return `Cannot finish the turn: this server lost the lease of session "${sessionId}" ` +
      "(it stalled past AGENT_SESSION_LEASE_SECONDS); nothing of the turn was kept, send it again";
  }
  if (kind === "invalid_output") {
    return "The model's answer does not match the response format, even after a repair request: " +
      `${listed(failure.errors ?? [])}. The answer is stored with the session all the same (run ${runId})`;
  }
  if (kind === "deadline") {
    const why = failure.message.replace(/^the turn was stopped: /, "");
    return `Cannot finish the turn on session "${sessionId}": ${why}; ` +
      "nothing of the turn was kept, send it again or ask for less at once";
  }
  return failedAnswer(failure, advice.retry);
}
