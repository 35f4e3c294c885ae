/**
 * One trace file's index: where each event's line is, by (user, session), in columns of numbers, each run id
 * kept once per file; and the reads that build and use it. Private to `reader.ts`.
 * @module
 */

/** The part of an open file the reader uses; `Deno.FsFile` is one. */
export interface TraceFile {
  read(buffer: Uint8Array): Promise<number | null>;
  seek(offset: number, whence: Deno.SeekMode): Promise<number>;
  stat(): Promise<{ ino: number | null; birthtime?: Date | null; size: number }>;
  close(): void;
}

/** The file moved (rotation) between the index refresh and the read: refresh and try again. */
export class FileMoved extends Error {}

const decoder = new TextDecoder();

/** Lines of one (user, session) in one file, as parallel columns; `runs` holds the file's run numbers. */
interface Bucket {
  offsets: number[];
  lengths: number[];
  times: number[];
  runs: number[];
}

// What the index holds, estimated for its bound (and measured on 200,000 events): four numbers an event in
// arrays that grow by half; a map entry with its key for a bucket (and its four arrays) or a run id.
const EVENT_BYTES = 48;
const BUCKET_BYTES = 320;
const RUN_BYTES = 24;

/** One trace file's index. `size` and the buckets only grow, until `drop()` frees them. */
export class FileIndex {
  /** Its `fileIdentity`: an inode alone may be a deleted file's, handed to a new one. */
  readonly id: string;
  /** Where the file is now (it moves on rotation). */
  path: string;
  /** Every whole line before this offset is indexed; lines are only ever added at this offset. */
  size = 0;
  /** The latest event time indexed (ms), kept by `drop()`: no event of the file is later. */
  lastTime = -Infinity;
  /** False once dropped: the file must be indexed again before it is read. */
  indexed = true;
  /** When a page last read from it, for dropping the least recently used first. */
  used = 0;
  /** About how many bytes the index takes. */
  bytes = 0;
  #buckets = new Map<string, Bucket>();
  /** Users of runs whose `run_start` has no top-level `user_id` (lines written before it existed). */
  legacyRuns = new Map<string, string>();
  #runs = new Map<string, number>();

  constructor(id: string, path: string) {
    this.id = id;
    this.path = path;
  }

  /**
   * Up to `max` lines of `key`'s events at or after offset `from`, of events at or after `since` (ms), of
   * one run unless `runId` is null; none while dropped.
   */
  lines(key: string, query: { from: number; since: number; runId: string | null; max: number }) {
    const { from, since, runId, max } = query;
    const lines: { offset: number; length: number }[] = [];
    const bucket = this.#buckets.get(key);
    const run = runId === null ? null : this.#runs.get(runId);
    if (bucket === undefined || run === undefined) return lines;
    for (let j = lowerBound(bucket.offsets, from); j < bucket.offsets.length && lines.length < max; j++) {
      if (!(bucket.times[j] >= since) || (run !== null && bucket.runs[j] !== run)) continue;
      lines.push({ offset: bucket.offsets[j], length: bucket.lengths[j] });
    }
    return lines;
  }

  /** Indexes one event's line under `key`. */
  add(key: string, offset: number, length: number, time: number, runId: string): void {
    let run = this.#runs.get(runId);
    if (run === undefined) {
      this.#runs.set(runId, run = this.#runs.size);
      this.bytes += RUN_BYTES + 2 * runId.length;
    }
    let bucket = this.#buckets.get(key);
    if (bucket === undefined) {
      this.#buckets.set(key, bucket = { offsets: [], lengths: [], times: [], runs: [] });
      this.bytes += BUCKET_BYTES + 2 * key.length;
    }
    bucket.offsets.push(offset);
    bucket.lengths.push(length);
    bucket.times.push(time);
    bucket.runs.push(run);
    this.bytes += EVENT_BYTES;
    if (time > this.lastTime) this.lastTime = time;
  }

  /** Frees the index (keeping `lastTime` and the legacy runs, which later files' lines may need). */
  drop(): void {
    this.#buckets = new Map();
    this.#runs = new Map();
    this.size = 0;
    this.bytes = 0;
    this.indexed = false;
  }
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

/** Calls `onLine` with each whole line's offset, length (newline included) and text from `from` to `to`. */
export async function eachLine(
  handle: TraceFile,
  from: number,
  to: number,
  onLine: (offset: number, length: number, line: string) => void,
): Promise<void> {
  await handle.seek(from, Deno.SeekMode.Start);
  let base = from;
  let carry = new Uint8Array(0);
  const chunk = new Uint8Array(64 * 1024);
  while (base + carry.length < to) {
    const n = await handle.read(chunk);
    if (n === null) break;
    const bytes = new Uint8Array(carry.length + n);
    bytes.set(carry);
    bytes.set(chunk.subarray(0, n), carry.length);
    let start = 0;
    for (let end = bytes.indexOf(0x0a); end !== -1; end = bytes.indexOf(0x0a, start)) {
      onLine(base + start, end + 1 - start, decoder.decode(bytes.subarray(start, end)));
      start = end + 1;
    }
    base += start;
    carry = bytes.slice(start);
  }
}

/** Exactly `length` bytes at `offset`; a `FileMoved` when the file ends first. */
export async function readAt(handle: TraceFile, offset: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  await handle.seek(offset, Deno.SeekMode.Start);
  for (let read = 0; read < length;) {
    const n = await handle.read(bytes.subarray(read));
    if (n === null) throw new FileMoved();
    read += n;
  }
  return bytes;
}
