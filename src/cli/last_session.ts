/**
 * Which session a chat run uses when none is named: a fresh one for each one-shot or piped run, and the one
 * `-c/--continue` goes back to, remembered per user in a small file next to the input history.
 * @module
 */
import { dirname } from "node:path";
import { mkdirSync } from "node:fs";
import { errorMessage } from "../errors.ts";

/** A new session id: `chat-` and 8 hex digits, as `/new` makes without one. */
export function freshSessionId(): string {
  return `chat-${crypto.randomUUID().slice(0, 8)}`;
}

/** Where the last one-shot or piped run's session is remembered: next to the input history file. */
export function lastSessionPath(historyPath: string): string {
  return `${historyPath}.last_session`;
}

function readAll(path: string): Record<string, string> {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return {};
    throw error;
  }
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new SyntaxError("not a JSON object of user ids to session ids");
  }
  return parsed as Record<string, string>;
}

/**
 * The session the last one-shot or piped run of `userId` used, or null when none is remembered. Throws
 * `Error` naming the file when it cannot be read or is not what this module writes.
 */
export function readLastSession(path: string, userId: string): string | null {
  try {
    const session = readAll(path)[userId];
    return typeof session === "string" ? session : null;
  } catch (error) {
    throw new Error(`Cannot read the last chat session from ${path}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
}

/**
 * Remembers `sessionId` as the last one-shot or piped run's session of `userId` (the file is mode 600, its
 * folder made if missing). Returns the problem as one line instead of throwing: the run goes on without it.
 */
export function rememberLastSession(path: string, userId: string, sessionId: string): string | null {
  try {
    let all: Record<string, string>;
    try {
      all = readAll(path);
    } catch {
      all = {}; // An unreadable file is replaced: it only ever held this.
    }
    all[userId] = sessionId;
    mkdirSync(dirname(path), { recursive: true });
    Deno.writeTextFileSync(path, `${JSON.stringify(all)}\n`, { mode: 0o600 });
    return null;
  } catch (error) {
    return `Cannot remember the chat session in ${path} (for -c): ${
      errorMessage(error)
    }; set AGENT_HISTORY_PATH`;
  }
}
