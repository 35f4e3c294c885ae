/**
 * The store's in-memory copy of recent sessions' message lists, so a turn does not reload its history from
 * SQLite. The store keeps it exact: it applies its own committed writes here and drops everything when
 * another connection has committed (`PRAGMA data_version`).
 * @module
 */
import type { StoredMessage } from "./types.ts";

/** Message lists by session id, at most `limit` of them; the least recently used goes first. */
export class HistoryCache {
  #lists = new Map<string, StoredMessage[]>();
  #limit: number;

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit < 0) {
      throw new RangeError(`historyCacheSessions must be an integer >= 0, got ${limit}`);
    }
    this.#limit = limit;
  }

  /** The session's list (marked most recently used), or undefined. Callers must not change it. */
  get(sessionId: string): readonly StoredMessage[] | undefined {
    const list = this.#lists.get(sessionId);
    if (list !== undefined) {
      this.#lists.delete(sessionId);
      this.#lists.set(sessionId, list);
    }
    return list;
  }

  /** Keeps `list` (of frozen messages) as the session's, evicting the least recently used beyond the limit. */
  put(sessionId: string, list: StoredMessage[]): void {
    if (this.#limit === 0) return;
    this.#lists.delete(sessionId);
    this.#lists.set(sessionId, list);
    if (this.#lists.size > this.#limit) this.#lists.delete(this.#lists.keys().next().value!);
  }

  /** Adds committed messages to the session's list, if it is cached. */
  append(sessionId: string, messages: readonly StoredMessage[]): void {
    this.#lists.get(sessionId)?.push(...messages);
  }

  /** Removes committed deletions from the session's list, if it is cached. */
  remove(sessionId: string, ids: readonly string[]): void {
    const list = this.#lists.get(sessionId);
    if (list === undefined) return;
    const gone = new Set(ids);
    this.#lists.set(sessionId, list.filter((m) => !gone.has(m.id)));
  }

  /** Forgets one session, or with no argument all of them. */
  forget(sessionId?: string): void {
    if (sessionId === undefined) this.#lists.clear();
    else this.#lists.delete(sessionId);
  }
}
