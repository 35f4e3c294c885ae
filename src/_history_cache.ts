/**
 * The store's in-memory copy of recent sessions' message lists, so a turn does not reload its history from
 * SQLite. The store keeps it exact: it applies its own committed writes here and drops everything when
 * another connection has committed (`PRAGMA data_version`).
 * @module
 */
import type { StoredMessage } from "./types.ts";

/**
 * Message lists by session key (the store joins user and session id), at most `limit` of them; the least
 * recently used goes first.
 */
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
  get(key: string): readonly StoredMessage[] | undefined {
    const list = this.#lists.get(key);
    if (list !== undefined) {
      this.#lists.delete(key);
      this.#lists.set(key, list);
    }
    return list;
  }

  /** Keeps `list` (of frozen messages) as the session's, evicting the least recently used beyond the limit. */
  put(key: string, list: StoredMessage[]): void {
    if (this.#limit === 0) return;
    this.#lists.delete(key);
    this.#lists.set(key, list);
    if (this.#lists.size > this.#limit) this.#lists.delete(this.#lists.keys().next().value!);
  }

  /** Adds committed messages to the session's list, if it is cached. */
  append(key: string, messages: readonly StoredMessage[]): void {
    this.#lists.get(key)?.push(...messages);
  }

  /** Removes committed deletions from the session's list, if it is cached. */
  remove(key: string, ids: readonly string[]): void {
    const list = this.#lists.get(key);
    if (list === undefined) return;
    const gone = new Set(ids);
    this.#lists.set(key, list.filter((m) => !gone.has(m.id)));
  }

  /** Forgets one session, or with no argument all of them. */
  forget(key?: string): void {
    if (key === undefined) this.#lists.clear();
    else this.#lists.delete(key);
  }
}
