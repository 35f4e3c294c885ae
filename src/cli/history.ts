/**
 * The REPL's input history: what the user typed, oldest first, in memory or kept in a file across runs.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { parseLine } from "../trace/trace.ts";

/** Entries the line editor recalls with the up arrow; `add` remembers a submitted entry. */
export interface InputHistory {
  /** Oldest first. */
  readonly entries: readonly string[];
  /** Remembers `entry` (a repeat of the newest entry is not added twice). Never throws. */
  add(entry: string): void;
}

/** Most entries a history keeps; older ones are dropped. */
export const MAX_HISTORY_ENTRIES = 1000;

/** A history that lasts as long as the process. */
export class MemoryHistory implements InputHistory {
  #entries: string[];
  #max: number;

  constructor(entries: readonly string[] = [], max = MAX_HISTORY_ENTRIES) {
    this.#entries = entries.slice(-max);
    this.#max = max;
  }

  get entries(): readonly string[] {
    return this.#entries;
  }

  /** Whether `entry` was added: not blank, and not a repeat of the newest entry. */
  add(entry: string): boolean {
    if (entry.trim() === "" || this.#entries.at(-1) === entry) return false;
    this.#entries.push(entry);
    if (this.#entries.length > this.#max) this.#entries.splice(0, this.#entries.length - this.#max);
    return true;
  }
}

/** Options of {@linkcode FileHistory}. */
export interface FileHistoryOptions {
  /**
   * Most entries kept in the file.
   * @default {1000}
   */
  max?: number;
  /**
   * Told once when the file cannot be written; the REPL goes on with history in memory.
   * @default {() => {}}
   */
  onError?: (error: unknown) => void;
}

/**
 * A history kept in a file, one JSON string per line (so an entry may span lines), readable by its owner
 * only (mode 600). It holds exactly what was typed, except entries that start with a space (as in bash,
 * a way to keep one out of the file). Each entry is appended, so REPLs running at once keep each other's;
 * past `max` and a fifth the file is cut back to its last `max` entries through a temporary file renamed
 * into place, so a crash never leaves it half-written.
 */
export class FileHistory implements InputHistory {
  #path: string;
  #memory: MemoryHistory;
  /** Lines in the file as far as this process knows: what it read plus what it appended. */
  #lines: number;
  #options: Required<FileHistoryOptions>;
  #failed = false;

  constructor(path: string, options: FileHistoryOptions = {}) {
    const { max = MAX_HISTORY_ENTRIES, onError = () => {} } = options;
    this.#path = path;
    this.#options = { max, onError };
    const saved = readEntries(path);
    this.#lines = saved.length;
    this.#memory = new MemoryHistory(saved.slice(-max), max);
  }

  get entries(): readonly string[] {
    return this.#memory.entries;
  }

  add(entry: string): void {
    if (!this.#memory.add(entry) || entry.startsWith(" ")) return;
    try {
      mkdirSync(dirname(this.#path), { recursive: true });
      Deno.writeTextFileSync(this.#path, JSON.stringify(entry) + "\n", { append: true, mode: 0o600 });
      // The mode applies only when the file is created; one made by hand may have been readable by others.
      Deno.chmodSync(this.#path, 0o600);
      if (++this.#lines > this.#options.max + Math.ceil(this.#options.max / 5)) this.#trim();
    } catch (error) {
      if (!this.#failed) this.#options.onError(error);
      this.#failed = true;
    }
  }

  /** Cuts the file back to its last `max` entries, whoever wrote them. */
  #trim(): void {
    const kept = readEntries(this.#path).slice(-this.#options.max);
    const temporary = `${this.#path}.${crypto.randomUUID()}.tmp`;
    Deno.writeTextFileSync(temporary, kept.map((e) => JSON.stringify(e) + "\n").join(""), { mode: 0o600 });
    Deno.chmodSync(temporary, 0o600);
    Deno.renameSync(temporary, this.#path);
    this.#lines = kept.length;
  }
}

function readEntries(path: string): string[] {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return [];
  }
  // A line that is not ours (or cut short) is skipped.
  return text.split("\n").map(parseLine).filter((entry): entry is string => typeof entry === "string");
}
