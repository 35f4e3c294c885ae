/**
 * The store's memory of recent sessions' messages, bounded by sessions and by bytes, least recently used
 * leaving first. Private to `sqlite.ts`.
 * @module
 */
import type { StoredMessage } from "../types.ts";

/** Sessions whose messages the store keeps in memory. */
export const HISTORY_CACHE_SESSIONS = 256;
/** About how many bytes those messages may take, with the request JSON built from each once sent. */
export const HISTORY_CACHE_BYTES = 8 * 1024 * 1024;

/** What a message or an entry costs besides its text: objects, properties, map slots (measured in V8). */
const OVERHEAD_BYTES = 280;

/** A stored message read back, with its rowid. */
export interface ReadMessage {
  message: StoredMessage;
  rowid: number;
}

interface Entry {
  list: StoredMessage[];
  /** The last rowid read: the next read starts after it. */
  rowid: number;
  bytes: number;
}

/**
 * About what keeping `m` costs: its text twice (as read, and as the request JSON the wire format keeps for
 * each frozen message it sent), plus the objects around it.
 */
export function messageBytes(m: StoredMessage): number {
  let chars = m.id.length + (m.content?.length ?? 0) + m.createdAt.length + (m.toolCallId?.length ?? 0);
  for (const call of m.toolCalls ?? []) chars += call.id.length + call.name.length + call.arguments.length;
  if (m.providerState !== undefined) chars += JSON.stringify(m.providerState).length;
  return 2 * chars + OVERHEAD_BYTES;
}

/** Sessions' message lists by name, each read once and then only extended by what is new. */
export class HistoryCache {
  #entries = new Map<string, Entry>();
  #bytes = 0;
  #maxSessions: number;
  #maxBytes: number;

  /** @throws {RangeError} when a bound is not a non-negative integer. */
  constructor(maxSessions: number, maxBytes: number) {
    for (const [name, value] of [["cacheSessions", maxSessions], ["cacheBytes", maxBytes]] as const) {
      if (!Number.isInteger(value) || value < 0) {
        throw new RangeError(
          `Cannot open the session store: ${name} must be a non-negative integer, got ${value}`,
        );
      }
    }
    this.#maxSessions = maxSessions;
    this.#maxBytes = maxBytes;
  }

  /**
   * `name`'s messages, brought up to date by `readAfter` (the rows after the last one read, oldest first),
   * kept as the most recently used; then the least recently used leave while either bound is passed (this
   * one too, when it alone passes the bytes). A new array each call.
   */
  messages(name: string, readAfter: (rowid: number) => ReadMessage[]): StoredMessage[] {
    const entry = this.#entries.get(name) ?? { list: [], rowid: 0, bytes: name.length + OVERHEAD_BYTES };
    this.delete(name);
    for (const { message, rowid } of readAfter(entry.rowid)) {
      entry.list.push(message);
      entry.rowid = rowid;
      entry.bytes += messageBytes(message);
    }
    this.#entries.set(name, entry);
    this.#bytes += entry.bytes;
    this.#evict();
    return entry.list.slice();
  }

  /** Whether `name`'s list is kept. */
  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /**
   * Adds to `name`'s list, when it is kept, messages just stored after the last one it holds (`rows`: each
   * with its rowid, oldest first), so the next read finds them without asking the database; a rowid not past
   * the last one makes the list be read afresh.
   */
  extend(name: string, rows: readonly ReadMessage[]): void {
    const entry = this.#entries.get(name);
    if (entry === undefined) return;
    for (const { message, rowid } of rows) {
      if (rowid <= entry.rowid) return this.delete(name);
      const bytes = messageBytes(message);
      entry.list.push(message);
      entry.rowid = rowid;
      entry.bytes += bytes;
      this.#bytes += bytes;
    }
    this.#evict();
  }

  /** Takes messages deleted from the database (`rows`: their rowids and ids) out of `name`'s list. */
  drop(name: string, rows: readonly { rowid: number; id: string }[]): void {
    const entry = this.#entries.get(name);
    if (entry === undefined || rows.length === 0) return;
    // SQLite may hand out the rowid of a deleted last row again: then the list is read afresh.
    if (rows.some((row) => row.rowid === entry.rowid)) return this.delete(name);
    const gone = new Set(rows.map((row) => row.id));
    const kept: StoredMessage[] = [];
    let freed = 0;
    for (const m of entry.list) {
      if (gone.has(m.id)) freed += messageBytes(m);
      else kept.push(m);
    }
    entry.list = kept;
    entry.bytes -= freed;
    this.#bytes -= freed;
  }

  /** Forgets every list. */
  clear(): void {
    this.#entries.clear();
    this.#bytes = 0;
  }

  /** The least recently used leave while either bound is passed. */
  #evict(): void {
    for (const [oldest] of this.#entries) {
      if (this.#entries.size <= this.#maxSessions && this.#bytes <= this.#maxBytes) break;
      this.delete(oldest);
    }
  }

  /** Forgets `name`'s list. */
  delete(name: string): void {
    const entry = this.#entries.get(name);
    if (entry === undefined) return;
    this.#entries.delete(name);
    this.#bytes -= entry.bytes;
  }
}
