/**
 * Whether a process of this host is gone, told by a file it locks: each process holds an exclusive lock on
 * its own mark in a folder the processes of one database share, and the kernel drops the lock when the process
 * ends, however it ends (kill -9 included). A mark that exists but that nobody locks belongs to a process that
 * is gone. This needs no more than the folder the database already writes: Deno lets a program read `/proc`
 * (a pid's start time) only with `--allow-all`.
 * @module
 */
import { join } from "node:path";

/** A mark's file name: the owner with every character a file name must not hold replaced. */
function fileOf(owner: string): string {
  return `${owner.replace(/[^A-Za-z0-9._-]/g, "_")}.lock`;
}

/** Options of {@linkcode ProcessMarks}. */
export interface ProcessMarksOptions {
  /** The clock the age of a mark is measured on. @default {() => Date.now()} */
  now?: () => number;
  /** How often this process touches its mark, in milliseconds, so its age says since when it is gone. @default {3_600_000} */
  touchEveryMs?: number;
  /** Marks of gone processes untouched for longer than this are removed by the next `mark`. @default {86_400_000} */
  keepGoneMs?: number;
}

/**
 * The marks of the processes that share a folder (`<folder>/.lease-owners`): this process's own, and the test
 * whether another's process is gone.
 */
export class ProcessMarks {
  readonly #dir: string;
  readonly #options: Required<ProcessMarksOptions>;
  #own: { path: string; file: Deno.FsFile; timer: ReturnType<typeof setInterval> } | undefined;

  /** Marks live in `<folder>/.lease-owners`. @throws {RangeError} when a duration is not a finite number > 0. */
  constructor(folder: string, options: ProcessMarksOptions = {}) {
    const { now = () => Date.now(), touchEveryMs = 3_600_000, keepGoneMs = 86_400_000 } = options;
    for (const [name, value] of Object.entries({ touchEveryMs, keepGoneMs })) {
      if (!(value > 0) || !Number.isFinite(value)) {
        throw new RangeError(`Cannot create ProcessMarks: ${name} must be a finite number > 0, got ${value}`);
      }
    }
    this.#dir = join(folder, ".lease-owners");
    this.#options = { now, touchEveryMs, keepGoneMs };
  }

  /**
   * Creates `owner`'s mark and locks it until {@linkcode ProcessMarks.close} or the end of the process; first
   * removes the marks of processes gone for longer than `keepGoneMs`. False when the folder cannot be written
   * or the lock not taken: then nobody learns that this process is gone, and its leases expire. Never throws.
   */
  mark(owner: string): boolean {
    if (this.#own !== undefined) return false;
    let file: Deno.FsFile | undefined;
    try {
      Deno.mkdirSync(this.#dir, { recursive: true });
      this.#sweep();
      const path = join(this.#dir, fileOf(owner));
      file = Deno.openSync(path, { read: true, write: true, create: true });
      if (!file.tryLockSync(true)) throw new Error("locked by another process");
      const timer = setInterval(() => this.#touch(), this.#options.touchEveryMs);
      Deno.unrefTimer(timer); // a mark never keeps the process running
      this.#own = { path, file, timer };
      this.#touch();
      return true;
    } catch {
      file?.close();
      return false;
    }
  }

  /**
   * True only when `owner`'s mark exists and no process locks it: the process that made it is gone. False
   * while it runs, when it has no mark here (another host, another folder, no permission) and whenever this
   * cannot tell. Never throws.
   */
  isGone(owner: string): boolean {
    let file: Deno.FsFile | undefined;
    try {
      file = Deno.openSync(join(this.#dir, fileOf(owner)), { read: true });
      return file.tryLockSync(true); // closing the file lets go of the lock
    } catch {
      return false;
    } finally {
      file?.close();
    }
  }

  /** Unlocks and removes this process's mark (its leases are released by then); never throws. */
  close(): void {
    const own = this.#own;
    if (own === undefined) return;
    this.#own = undefined;
    clearInterval(own.timer);
    try {
      Deno.removeSync(own.path);
    } catch {
      // Left behind: unlocked, it reads as gone, and a later sweep removes it.
    }
    own.file.close();
  }

  #touch(): void {
    if (this.#own === undefined) return;
    const at = new Date(this.#options.now());
    try {
      Deno.utimeSync(this.#own.path, at, at);
    } catch {
      // An old age only makes the mark go sooner, once gone.
    }
  }

  /** Removes marks nobody locks and nobody touched for `keepGoneMs`: their leases expired long ago. */
  #sweep(): void {
    const before = this.#options.now() - this.#options.keepGoneMs;
    for (const entry of Deno.readDirSync(this.#dir)) {
      if (!entry.isFile || !entry.name.endsWith(".lock")) continue;
      const path = join(this.#dir, entry.name);
      let file: Deno.FsFile | undefined;
      try {
        file = Deno.openSync(path, { read: true });
        const touched = file.statSync().mtime?.getTime() ?? Number.POSITIVE_INFINITY;
        if (touched < before && file.tryLockSync(true)) Deno.removeSync(path);
      } catch {
        // Gone meanwhile, or not ours to read: left as it is.
      } finally {
        file?.close();
      }
    }
  }
}
