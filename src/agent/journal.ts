/**
 * A turn's journal: every write of a turn goes through it, so the loop owns no storage. The writes are the
 * durability rules themselves: a step's messages in one transaction (the calls before any of them runs, each
 * result as its call ends), the paused step instead of calls without results, the resumed step's calls in
 * place of the pause, the exact messages an aborted turn takes back, the tokens no write carried, and a
 * compaction the token budget made due within the turn. {@linkcode storeJournal} writes them to the session's
 * store; a caller may pass another (`RunOptions`), with the reads the turn opens from ({@linkcode TurnReads}).
 * @module
 */
import type {
  Calibration,
  MemoryWrite,
  MemoryWritten,
  PendingStep,
  SessionKey,
  TranscriptStore,
  UsageStore,
} from "../store/store.ts";
import type { StoredMessage, UsageEntry } from "../types.ts";

/** What goes with a step's messages in their transaction. */
export interface JournalAppend {
  /** The provider's count of the request the messages answer. @default {undefined} */
  calibration?: Calibration;
  /** Model calls' tokens no earlier write carried. @default {[]} */
  usage?: readonly UsageEntry[];
  /** The user's memory items the request recalled. @default {[]} */
  memoryUsed?: readonly number[];
}

/** Where a turn's writes go; each is one transaction, whole or not at all. */
export interface TurnJournal {
  /** Appends a step's messages (idempotent by id). */
  append(messages: readonly StoredMessage[], options: JournalAppend): Promise<void>;
  /** Keeps the step that waits for approval; rejects, keeping nothing, if one waits already. */
  pause(step: PendingStep, options: { usage?: readonly UsageEntry[] }): Promise<void>;
  /** Replaces the paused step of `runId` by `messages`; false, keeping nothing, when it was resolved meanwhile. */
  resume(runId: string, messages: readonly StoredMessage[]): Promise<boolean>;
  /** Takes back those of `ids` that were kept; resolves to how many. */
  discard(ids: readonly string[]): Promise<number>;
  /** Counts model calls' tokens that no other write carried. */
  recordUsage(usage: readonly UsageEntry[]): Promise<void>;
  /**
   * Keeps `summary` in place of the messages `cutIds` (`turns` user turns), merging `memory` into the user's
   * memory; rejects, keeping nothing, when the kept summary is no longer `previous`. Resolves to what the
   * memory write did (null without one).
   */
  compact(
    summary: string,
    cutIds: readonly string[],
    turns: number,
    options: { previous?: string | null; memory?: MemoryWrite },
  ): Promise<MemoryWritten | null>;
}

/** What a turn reads of its session when it opens: the session, its messages, the step that waits. */
export type TurnReads = Pick<TranscriptStore, "get" | "getOrCreate" | "messages" | "pendingStep">;

/** The store methods a store journal writes with. */
export type JournalStore =
  & Pick<TranscriptStore, "append" | "savePending" | "resolvePending" | "discardMessages" | "applyCompaction">
  & Pick<UsageStore, "recordUsage">;

/** The journal of session `key` in `store`. */
export function storeJournal(store: JournalStore, key: SessionKey): TurnJournal {
  return {
    append: async (messages, options) => void await store.append(key, messages, options),
    pause: (step, options) => store.savePending(key, step, options),
    resume: (runId, messages) => store.resolvePending(key, runId, messages),
    discard: (ids) => store.discardMessages(key, ids),
    recordUsage: (entries) => store.recordUsage(key, entries),
    compact: (summary, cutIds, turns, options) => store.applyCompaction(key, summary, cutIds, turns, options),
  };
}
