/**
 * Pages through one session's events in the (rotated) JSONL trace without reading the trace: an in-memory
 * index says where each event's line is, so a page reads exactly its own lines, asynchronously.
 * @module
 */
import { type AppendedLine, fileIdentity, parseLine, traceFiles } from "./trace.ts";
import { eachLine, FileIndex, FileMoved, readAt, type TraceFile } from "./_file_index.ts";
import { sessionName } from "../store/store.ts";

export type { TraceFile };

/** About how many bytes the index of the files on disk may take, the file being written aside. */
export const TRACE_INDEX_BYTES = 16 * 1024 * 1024;

/** Where a page starts: the next event's file (by its identity, which survives rotation) and byte offset. */
export interface TraceCursor {
  /** The file's `fileIdentity`: inode and birth time. */
  file: string;
  offset: number;
}

/** Options of {@linkcode TraceReader}. */
export interface TraceReaderOptions {
  /** Opens a trace file for reading (tests count the bytes read). @default {(path) => Deno.open(path)} */
  open?: (path: string) => Promise<TraceFile>;
  /**
   * About how many bytes the index may take: past it, the least recently read files' indexes are dropped
   * (never the file being written), to be built again when a page needs one. @default {TRACE_INDEX_BYTES}
   */
  maxIndexBytes?: number;
}

/** What {@linkcode TraceReader.page} selects. */
export interface TracePageQuery {
  userId: string;
  sessionId: string;
  /** Only events whose `ts` is at or after this ISO time (the session's creation). */
  since: string;
  /** Only events of this run, or of every run when null. */
  runId: string | null;
  /** Events per page, at least 1. */
  limit: number;
  /** Where to start, or null for the oldest event. */
  cursor: TraceCursor | null;
}

/** One page of events, oldest first, and where the next page starts (null on the last page). */
export interface TracePage {
  events: Record<string, unknown>[];
  nextCursor: TraceCursor | null;
}

/** Where the trace route reads pages: this file index, or the database's table when replicas share one. */
export interface TracePages {
  /** One page of a session's events, oldest first. */
  page(query: TracePageQuery): Promise<TracePage>;
}

type Span = { file: FileIndex; offset: number; length: number };

const decoder = new TextDecoder();

/**
 * Reads the trace at `path` and its rotated files a page at a time. Each call first indexes lines appended
 * since the last one (by any process) from each file's last indexed size; lines this process writes can be
 * handed over by {@linkcode TraceReader.noteAppend} so they are never read back. The index takes about 60
 * bytes per event (for runs of 8 events); past `maxIndexBytes` the least recently read files' indexes are
 * dropped, each keeping only its latest event time, so that a page of a session begun after it never builds
 * it again. Files rotation deletes leave the index on the next call.
 */
export class TraceReader implements TracePages {
  #path: string;
  #open: (path: string) => Promise<TraceFile>;
  #maxIndexBytes: number;
  #files = new Map<string, FileIndex>();
  /** Files on disk, oldest first, as of the last refresh. */
  #chain: FileIndex[] = [];
  #pending: Promise<void> = Promise.resolve();
  /** Counts the pages read, to tell the least recently read file. */
  #clock = 0;

  /** @throws {RangeError} when `maxIndexBytes` is negative. */
  constructor(path: string, options: TraceReaderOptions = {}) {
    const { open = (path: string) => Deno.open(path), maxIndexBytes = TRACE_INDEX_BYTES } = options;
    if (!(maxIndexBytes >= 0)) {
      throw new RangeError(`maxIndexBytes must not be negative, got ${maxIndexBytes}`);
    }
    this.#path = path;
    this.#open = open;
    this.#maxIndexBytes = maxIndexBytes;
  }

  /** About how many bytes the index takes now. */
  get indexBytes(): number {
    let bytes = 0;
    for (const file of this.#files.values()) bytes += file.bytes;
    return bytes;
  }

  /** Indexes what was appended since the last call, one call at a time. Rejects when a file cannot be read. */
  refresh(): Promise<void> {
    return this.#exclusive(() => this.#refreshNow());
  }

  /** One page of a session's events, oldest first. Rejects only when a trace file cannot be read. */
  async page(query: TracePageQuery): Promise<TracePage> {
    if (!(query.limit >= 1)) throw new RangeError(`limit must be at least 1, got ${query.limit}`);
    for (let attempt = 1;; attempt++) {
      try {
        await this.refresh();
        let spans = this.#select(query);
        // A dropped file the page reaches is indexed again, one at a time, until none is left on its way.
        while (!Array.isArray(spans)) {
          const dropped = spans;
          await this.#exclusive(() => this.#reindex(dropped));
          spans = this.#select(query);
        }
        const next = spans.length > query.limit ? spans.pop()! : null;
        const clock = ++this.#clock;
        for (const span of spans) span.file.used = clock;
        await this.#exclusive(() => Promise.resolve(this.#evict()));
        const events = await this.#read(spans);
        return { events, nextCursor: next && { file: next.file.id, offset: next.offset } };
      } catch (error) {
        if (!(error instanceof FileMoved) || attempt === 3) throw error;
      }
    }
  }

  /** Indexes a line this process just wrote (the tracer's `onAppend`), if it is the next one. Never throws. */
  noteAppend(line: AppendedLine): void {
    const file = this.#files.get(line.file);
    if (file !== undefined) this.#add(file, line.offset, line.length, line.event);
  }

  /** Runs `work` after every refresh, index or drop before it: one changes the index at a time. */
  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#pending.then(work);
    this.#pending = run.then(() => {}, () => {});
    return run;
  }

  async #refreshNow(): Promise<void> {
    // Newest first: a rotation between two stats then shows one file twice (kept once, in the newer place)
    // rather than hiding one; a file created meanwhile is seen next time.
    const chain: FileIndex[] = [];
    // Only a file that grew since it was indexed is opened (most are whole, and rotated ones never grow).
    const grown = new Set<FileIndex>();
    for (const path of traceFiles(this.#path).reverse()) {
      const info = await Deno.stat(path).catch((error) => {
        if (error instanceof Deno.errors.NotFound) return null;
        throw error;
      });
      if (info === null) continue;
      const id = fileIdentity(info);
      if (chain.some((file) => file.id === id)) continue;
      let file = this.#files.get(id);
      if (file === undefined || info.size < file.size) this.#files.set(id, file = new FileIndex(id, path));
      file.path = path;
      chain.unshift(file);
      if (file.indexed && info.size > file.size) grown.add(file);
    }
    for (const id of this.#files.keys()) {
      if (!chain.some((file) => file.id === id)) this.#files.delete(id);
    }
    this.#chain = chain;
    for (const file of chain) if (grown.has(file)) await this.#indexTail(file);
    this.#evict();
  }

  /** Builds a dropped file's index again; a `FileMoved` when it is no longer where the last refresh saw it. */
  async #reindex(file: FileIndex): Promise<void> {
    if (file.indexed) return;
    file.indexed = true;
    // The most recently read from now: another page's drop must not take it before this page reads it.
    file.used = ++this.#clock;
    if (await this.#indexTail(file)) return;
    file.drop();
    throw new FileMoved();
  }

  /** Drops the least recently read files' indexes while over the bound, never the file being written. */
  #evict(): void {
    let bytes = this.indexBytes;
    const writing = this.#chain.at(-1);
    // Oldest first among files not read since they were indexed.
    const victims = this.#chain.filter((file) => file.indexed && file !== writing);
    victims.sort((a, b) => a.used - b.used);
    for (const file of victims) {
      if (bytes <= this.#maxIndexBytes) break;
      bytes -= file.bytes;
      file.drop();
    }
  }

  /**
   * Indexes the whole lines after `file.size`, up to the size the file has now. False when the path no
   * longer holds the file (rotation moved it on).
   */
  async #indexTail(file: FileIndex): Promise<boolean> {
    const handle = await this.#open(file.path);
    try {
      const info = await handle.stat();
      if (fileIdentity(info) !== file.id) return false;
      if (info.size > file.size) {
        await eachLine(handle, file.size, info.size, (offset, length, line) => {
          this.#add(file, offset, length, parseLine(line));
        });
      }
      return true;
    } finally {
      handle.close();
    }
  }

  /** Indexes one line if it is the next one of `file`; a line that is not an event only moves the size. */
  #add(file: FileIndex, offset: number, length: number, event: unknown): void {
    if (offset !== file.size) return;
    file.size += length;
    if (typeof event !== "object" || event === null) return;
    const { user_id, session_id, run_id, ts, event: name, data } = event as Record<string, unknown>;
    if (typeof session_id !== "string" || typeof run_id !== "string" || typeof ts !== "string") return;
    let userId = typeof user_id === "string" ? user_id : undefined;
    if (userId === undefined) {
      const started = (data as Record<string, unknown> | null)?.user_id;
      if (name === "run_start" && typeof started === "string") file.legacyRuns.set(run_id, started);
      userId = this.#files.values().map((f) => f.legacyRuns.get(run_id)).find((user) => user !== undefined);
    }
    const time = Date.parse(ts);
    if (userId === undefined || Number.isNaN(time)) return;
    file.add(sessionName({ userId, sessionId: session_id }), offset, length, time, run_id);
  }

  /**
   * The lines of up to `limit + 1` matching events from the cursor on, from the index alone; or the first
   * dropped file on the way that may hold some (one with events after the session began).
   */
  #select(query: TracePageQuery): Span[] | FileIndex {
    const { runId, limit, cursor } = query;
    const since = Date.parse(query.since);
    const key = sessionName(query);
    // A cursor into a file rotation has since deleted starts at the oldest file left.
    let first = cursor === null ? 0 : this.#chain.findIndex((file) => file.id === cursor.file);
    let from = cursor?.offset ?? 0;
    if (first === -1) [first, from] = [0, 0];
    const spans: Span[] = [];
    for (let i = first; i < this.#chain.length && spans.length <= limit; i++) {
      const file = this.#chain[i];
      if (!file.indexed && file.lastTime >= since) return file;
      const lines = file.lines(key, {
        from: i === first ? from : 0,
        since,
        runId,
        max: limit + 1 - spans.length,
      });
      for (const { offset, length } of lines) spans.push({ file, offset, length });
    }
    return spans;
  }

  /** Reads exactly the given lines, merging adjacent ones into one read. */
  async #read(spans: Span[]): Promise<Record<string, unknown>[]> {
    const events: Record<string, unknown>[] = [];
    for (let i = 0; i < spans.length;) {
      const file = spans[i].file;
      const handle = await this.#open(file.path);
      try {
        if (fileIdentity(await handle.stat()) !== file.id) throw new FileMoved();
        while (i < spans.length && spans[i].file === file) {
          const start = spans[i].offset;
          let end = start;
          for (; i < spans.length && spans[i].file === file && spans[i].offset === end; i++) {
            end += spans[i].length;
          }
          for (const line of decoder.decode(await readAt(handle, start, end - start)).split("\n")) {
            const event = parseLine(line);
            if (typeof event === "object" && event !== null) events.push(event as Record<string, unknown>);
          }
        }
      } finally {
        handle.close();
      }
    }
    return events;
  }
}
