/**
 * Pages through one session's events in the (rotated) JSONL trace without reading the trace: an in-memory
 * index says where each event's line is, so a page reads exactly its own lines, asynchronously.
 * @module
 */
import { type AppendedLine, fileIdentity, parseLine, traceFiles } from "./trace.ts";

/** Where a page starts: the next event's file (by its identity, which survives rotation) and byte offset. */
export interface TraceCursor {
  /** The file's `fileIdentity`: inode and birth time. */
  file: string;
  offset: number;
}

/** The part of an open file the reader uses; `Deno.FsFile` is one. */
export interface TraceFile {
  read(buffer: Uint8Array): Promise<number | null>;
  seek(offset: number, whence: Deno.SeekMode): Promise<number>;
  stat(): Promise<{ ino: number | null; birthtime?: Date | null; size: number }>;
  close(): void;
}

/** Options of {@linkcode TraceReader}. */
export interface TraceReaderOptions {
  /** Opens a trace file for reading (tests count the bytes read). @default {(path) => Deno.open(path)} */
  open?: (path: string) => Promise<TraceFile>;
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

/** Lines of one (user, session) in one file, as parallel arrays to keep the index small. */
interface Bucket {
  offsets: number[];
  lengths: number[];
  times: number[];
  runs: string[];
}

interface IndexedFile {
  /** Its `fileIdentity`: an inode alone may be a deleted file's, handed to a new one. */
  id: string;
  /** Where the file is now (it moves on rotation). */
  path: string;
  /** Every whole line before this offset is indexed; lines are only ever added at this offset. */
  size: number;
  buckets: Map<string, Bucket>;
  /** Users of runs whose `run_start` has no top-level `user_id` (lines written before it existed). */
  legacyRuns: Map<string, string>;
}

type Span = { file: IndexedFile; offset: number; length: number };

/** The file moved (rotation) between the index refresh and the read: refresh and try again. */
class FileMoved extends Error {}

const decoder = new TextDecoder();

/**
 * Reads the trace at `path` and its rotated files a page at a time. Each call first indexes lines appended
 * since the last one (by any process) from each file's last indexed size; lines this process writes can be
 * handed over by {@linkcode TraceReader.noteAppend} so they are never read back. The index holds about 40
 * bytes per event of the at most 6 files on disk (~1.6 × maxBytes at worst, for ~150-byte lines); files
 * rotation deletes leave it on the next call.
 */
export class TraceReader implements TracePages {
  #path: string;
  #open: (path: string) => Promise<TraceFile>;
  #files = new Map<string, IndexedFile>();
  /** Files on disk, oldest first, as of the last refresh. */
  #chain: IndexedFile[] = [];
  #pending: Promise<void> = Promise.resolve();

  constructor(path: string, options: TraceReaderOptions = {}) {
    const { open = (path: string) => Deno.open(path) } = options;
    this.#path = path;
    this.#open = open;
  }

  /** Indexes what was appended since the last call, one call at a time. Rejects when a file cannot be read. */
  refresh(): Promise<void> {
    const run = this.#pending.then(() => this.#refreshNow());
    this.#pending = run.catch(() => {});
    return run;
  }

  /** One page of a session's events, oldest first. Rejects only when a trace file cannot be read. */
  async page(query: TracePageQuery): Promise<TracePage> {
    if (!(query.limit >= 1)) throw new RangeError(`limit must be at least 1, got ${query.limit}`);
    for (let attempt = 1;; attempt++) {
      await this.refresh();
      const spans = this.#select(query);
      const next = spans.length > query.limit ? spans.pop()! : null;
      try {
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

  async #refreshNow(): Promise<void> {
    // Newest first: a rotation between two stats then shows one file twice (kept once, in the newer place)
    // rather than hiding one; a file created meanwhile is seen next time.
    const chain: IndexedFile[] = [];
    // Only a file that grew since it was indexed is opened (most are whole, and rotated ones never grow).
    const grown = new Set<IndexedFile>();
    for (const path of traceFiles(this.#path).reverse()) {
      const info = await Deno.stat(path).catch((error) => {
        if (error instanceof Deno.errors.NotFound) return null;
        throw error;
      });
      if (info === null) continue;
      const id = fileIdentity(info);
      if (chain.some((file) => file.id === id)) continue;
      let file = this.#files.get(id);
      if (file === undefined || info.size < file.size) {
        file = { id, path, size: 0, buckets: new Map(), legacyRuns: new Map() };
        this.#files.set(id, file);
      }
      file.path = path;
      chain.unshift(file);
      if (info.size > file.size) grown.add(file);
    }
    for (const id of this.#files.keys()) {
      if (!chain.some((file) => file.id === id)) this.#files.delete(id);
    }
    this.#chain = chain;
    for (const file of chain) if (grown.has(file)) await this.#indexTail(file);
  }

  /** Indexes the whole lines after `file.size`, up to the size the file has now. */
  async #indexTail(file: IndexedFile): Promise<void> {
    const handle = await this.#open(file.path);
    try {
      const info = await handle.stat();
      if (fileIdentity(info) !== file.id || info.size <= file.size) return;
      await handle.seek(file.size, Deno.SeekMode.Start);
      let base = file.size;
      let carry = new Uint8Array(0);
      const chunk = new Uint8Array(64 * 1024);
      while (base + carry.length < info.size) {
        const n = await handle.read(chunk);
        if (n === null) break;
        const bytes = new Uint8Array(carry.length + n);
        bytes.set(carry);
        bytes.set(chunk.subarray(0, n), carry.length);
        let start = 0;
        for (let end = bytes.indexOf(0x0a); end !== -1; end = bytes.indexOf(0x0a, start)) {
          this.#add(
            file,
            base + start,
            end + 1 - start,
            parseLine(decoder.decode(bytes.subarray(start, end))),
          );
          start = end + 1;
        }
        base += start;
        carry = bytes.slice(start);
      }
    } finally {
      handle.close();
    }
  }

  /** Indexes one line if it is the next one of `file`; a line that is not an event only moves the size. */
  #add(file: IndexedFile, offset: number, length: number, event: unknown): void {
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
    const key = `${userId}\u0000${session_id}`;
    let bucket = file.buckets.get(key);
    if (bucket === undefined) {
      file.buckets.set(key, bucket = { offsets: [], lengths: [], times: [], runs: [] });
    }
    bucket.offsets.push(offset);
    bucket.lengths.push(length);
    bucket.times.push(time);
    bucket.runs.push(run_id);
  }

  /** The lines of up to `limit + 1` matching events from the cursor on, from the index alone. */
  #select(query: TracePageQuery): Span[] {
    const { runId, limit, cursor } = query;
    const since = Date.parse(query.since);
    const key = `${query.userId}\u0000${query.sessionId}`;
    // A cursor into a file rotation has since deleted starts at the oldest file left.
    let first = cursor === null ? 0 : this.#chain.findIndex((file) => file.id === cursor.file);
    let from = cursor?.offset ?? 0;
    if (first === -1) [first, from] = [0, 0];
    const spans: Span[] = [];
    for (let i = first; i < this.#chain.length && spans.length <= limit; i++) {
      const file = this.#chain[i];
      const bucket = file.buckets.get(key);
      if (bucket === undefined) continue;
      for (let j = i === first ? lowerBound(bucket.offsets, from) : 0; j < bucket.offsets.length; j++) {
        if (spans.length > limit) break;
        if (!(bucket.times[j] >= since) || (runId !== null && bucket.runs[j] !== runId)) continue;
        spans.push({ file, offset: bucket.offsets[j], length: bucket.lengths[j] });
      }
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

async function readAt(handle: TraceFile, offset: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  await handle.seek(offset, Deno.SeekMode.Start);
  for (let read = 0; read < length;) {
    const n = await handle.read(bytes.subarray(read));
    if (n === null) throw new FileMoved();
    read += n;
  }
  return bytes;
}

/** The first index whose value is at least `value` (the array is sorted). */
function lowerBound(values: number[], value: number): number {
  let low = 0;
  let high = values.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (values[mid] < value) low = mid + 1;
    else high = mid;
  }
  return low;
}
