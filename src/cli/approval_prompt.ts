/**
 * The chat's approval prompt: when a turn waits for the user, each waiting call is asked about in turn
 * (`[y]es / [n]o / [a]lways for this session`), and the run resumes with the answers.
 * @module
 */
import { approvalCalls, type Decision } from "../approval/decisions.ts";
import type { PendingStep } from "../store/store.ts";
import { shorten } from "../shorten.ts";

/** The REPL's prompt while it waits for an answer to {@linkcode approvalQuestion}, in place of `you> `. */
export const APPROVAL_PROMPT = "[y/n/a]> ";

/** The question for one waiting call, as the chat asks it. */
export function approvalQuestion(name: string, args: string): string {
  return `Allow ${name} ${shorten(args, 200)}? [y]es / [n]o / [a]lways for this session `;
}

/**
 * Asks about every waiting call of `pending` through `ask` (null: input ended) and returns the decisions,
 * or null when input ended first (the turn keeps waiting). An answer of "always" approves and adds the tool
 * to `allowed`; anything unclear is asked again.
 */
export async function askApprovals(
  pending: PendingStep,
  ask: (question: string) => Promise<string | null>,
  allowed: Set<string>,
): Promise<Record<string, Decision> | null> {
  const decisions: Record<string, Decision> = {};
  for (const call of approvalCalls(pending)) {
    let question = approvalQuestion(call.name, call.arguments);
    for (;;) {
      const answer = await ask(question);
      if (answer === null) return null;
      const word = answer.trim().toLowerCase();
      if (word === "y" || word === "yes") decisions[call.id] = "approve";
      else if (word === "n" || word === "no") decisions[call.id] = "deny";
      else if (word === "a" || word === "always") {
        decisions[call.id] = "approve";
        allowed.add(call.name);
      } else {
        question = `Please answer y, n or a. ${approvalQuestion(call.name, call.arguments)}`;
        continue;
      }
      break;
    }
  }
  return decisions;
}
