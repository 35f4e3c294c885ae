/**
 * The REPL's input history: what the user typed, oldest first, in memory or kept in a file across runs.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

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

  add(entry: string): void {
    if (entry.trim() === "" || this.#entries.at(-1) === entry) return;
    this.#entries.push(entry);
    if (this.#entries.length > this.#max) this.#entries.splice(0, this.#entries.length - this.#max);
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
 * a way to keep one out of the file).
 */
export class FileHistory implements InputHistory {
  #path: string;
  #memory: MemoryHistory;
  #saved: string[];
  #max: number;
  #onError: (error: unknown) => void;
  #failed = false;

  constructor(path: string, options: FileHistoryOptions = {}) {
    const { max = MAX_HISTORY_ENTRIES, onError = () => {} } = options;
    this.#path = path;
    this.#max = max;
    this.#onError = onError;
    this.#saved = readEntries(path).slice(-max);
    this.#memory = new MemoryHistory(this.#saved, max);
  }

  get entries(): readonly string[] {
    return this.#memory.entries;
  }

  add(entry: string): void {
    const fresh = entry.trim() !== "" && this.#memory.entries.at(-1) !== entry;
    this.#memory.add(entry);
    if (!fresh || entry.startsWith(" ")) return;
    this.#saved.push(entry);
    if (this.#saved.length > this.#max) this.#saved.splice(0, this.#saved.length - this.#max);
    try {
      mkdirSync(dirname(this.#path), { recursive: true });
      const text = this.#saved.map((e) => JSON.stringify(e) + "\n").join("");
      Deno.writeTextFileSync(this.#path, text, { mode: 0o600 });
      // The mode applies only when the file is created; one made by hand may have been readable by others.
      Deno.chmodSync(this.#path, 0o600);
    } catch (error) {
      if (!this.#failed) this.#onError(error);
      this.#failed = true;
    }
  }
}

function readEntries(path: string): string[] {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    return [];
  }
  const entries: string[] = [];
  for (const line of text.split("\n")) {
    try {
      const entry = JSON.parse(line);
      if (typeof entry === "string") entries.push(entry);
    } catch {
      // A line that is not ours (or cut short) is skipped.
    }
  }
  return entries;
}
