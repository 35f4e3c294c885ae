/**
 * A request's private session: the OpenAI-compatible route's turn without a session id. The turn reads the
 * client's messages as its session and keeps nothing of it, no database involved, but the tokens it spends,
 * counted for the user where the daily quota reads them.
 * @module
 */
import type { TurnJournal, TurnReads } from "../agent/journal.ts";
import type { Session, SessionKey, UsageStore } from "../store/store.ts";
import type { Message, StoredMessage } from "../types.ts";

/** The reads and the journal of a request's session `key` whose history is `history`. */
export function requestSession(
  key: SessionKey,
  history: readonly Message[],
  options: { usage: Pick<UsageStore, "recordUsage">; now: () => Date },
): { reads: TurnReads; journal: TurnJournal } {
  const { usage, now } = options;
  const at = now().toISOString();
  const messages: StoredMessage[] = history.map((m, i) =>
    Object.freeze({ ...m, id: `history:${i}`, createdAt: at })
  );
  const session: Session = {
    id: key.sessionId,
    userId: key.userId,
    summary: null,
    turnCount: history.filter((m) => m.role === "user").length,
    compactedTurns: 0,
    calibration: null,
    title: null,
    createdAt: at,
    updatedAt: at,
  };
  const reads: TurnReads = {
    get: () => Promise.resolve({ ...session }),
    getOrCreate: () => Promise.resolve({ ...session }),
    messages: () => Promise.resolve([...messages]),
    pendingStep: () => Promise.resolve(null),
  };
  // What the turn appended, so an abort's rollback counts what it takes back; nothing is kept anywhere.
  const appended = new Set<string>();
  const count = (entries: Parameters<TurnJournal["recordUsage"]>[0]) =>
    entries.length === 0 ? Promise.resolve() : usage.recordUsage(key, entries);
  const journal: TurnJournal = {
    append: async (added, { usage = [] }) => {
      for (const message of added) appended.add(message.id);
      await count(usage);
    },
    pause: () =>
      Promise.reject(new TypeError("Cannot pause a request's private session: nobody can approve")),
    resume: () => Promise.resolve(false),
    discard: (ids) => Promise.resolve(ids.filter((id) => appended.delete(id)).length),
    recordUsage: count,
    // The summary lives in the turn's memory alone; nothing is merged into the user's memory.
    compact: () => Promise.resolve(null),
  };
  return { reads, journal };
}
