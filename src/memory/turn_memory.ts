/**
 * A turn's memory: the session's summary and raw history as the turn's requests are built from them, and
 * the two hooks the loop calls — before each model request (compact if the request would not fit the token
 * budget, then recall the user's memory into what fits) and after the answer (a compaction due by the turn
 * trigger, in the background). The loop owns no compaction state; this does.
 * @module
 */
import type { EventSink } from "../events.ts";
import type { Calibration, MemoryStore, RecalledItem, SessionKey, TranscriptStore } from "../store/store.ts";
import type { StoredMessage, ToolSchema } from "../types.ts";
import { compactIfDue, type CompactionDeps, type CompactionResult, requestTokens } from "./compact.ts";
import type { FixedRequest, MemoryState } from "./compact.ts";
import { estimateMessageTokens, estimateRequestTokens, overTurnLimit } from "./plan.ts";
import { defaultCompactBatch } from "../config.ts";
import { type MemoryEntry, runtimeContextText } from "./summary.ts";

/** One background compaction: given where to report and what stops it; it must not reject. */
export type BackgroundJob = (emit: EventSink, signal: AbortSignal) => Promise<void>;

/**
 * Where the after-answer hook starts a compaction: it runs `job` for the session later, or says false (one
 * runs already, or shutdown has begun). `src/session/background.ts` is the one the runtime gives.
 */
export interface BackgroundCompactions {
  start(key: SessionKey, job: BackgroundJob): boolean;
  /** How many compactions are running. */
  readonly running: number;
  /** Resolves once no compaction is running, including any started meanwhile. */
  idle(): Promise<void>;
  /** Takes no more work and waits for what runs; after `graceMs` it aborts them. */
  close(graceMs?: number): Promise<void>;
}

/** What the hooks need of the agent: its summarizer, thresholds and background runner. */
export interface MemorySettings extends Pick<CompactionDeps, "summarizer" | "maxRawTurns" | "maxCtxTokens"> {
  /** AGENT_COMPACT_BATCH. @default {defaultCompactBatch(maxRawTurns)} */
  compactBatch?: number;
  /** Where a compaction due by the turn trigger runs, after the answer. */
  compactions: BackgroundCompactions;
  /** The user's memory across sessions; null or absent: off (AGENT_USER_MEMORY=0). @default {null} */
  userMemory?: UserMemorySettings | null;
}

/** How much of the user's memory is kept and recalled. */
export interface UserMemorySettings {
  /** AGENT_USER_MEMORY_ITEMS: items kept per user, the least recently used leaving first. */
  items: number;
  /** AGENT_USER_MEMORY_RECALL: items recalled into each request, at most. */
  recall: number;
  /** Where the memory is recalled from, when not the run's store. @default {the run's store} */
  store?: Pick<MemoryStore, "recallMemory">;
}

/** Where a turn's memory reads and keeps what it does. */
export interface MemoryStorage {
  /** The session as stored, which a compaction after the answer plans on. */
  reads: Pick<TranscriptStore, "get" | "messages">;
  /** Where a compaction is kept (the turn's journal). */
  kept: Pick<TranscriptStore, "applyCompaction">;
  /** Where the user's memory is recalled from; null: nowhere (a recall with memory on is a `TypeError`). */
  recall: Pick<MemoryStore, "recallMemory"> | null;
}

/** What a recall found for the next request, and what of it the request carries. */
export interface Recall {
  /** The items found, most relevant first. */
  found: RecalledItem[];
  /** How many of them the request carries: the rest did not fit the token budget. */
  kept: number;
  /** Whether this differs from the turn's previous request: the store was asked, or the budget kept others. */
  changed: boolean;
}

/** One turn's view of its session's memory. */
export class TurnMemory {
  readonly key: SessionKey;
  /** `sessions.summary` as the next request carries it: JSON text or null. */
  summary: string | null;
  /** The raw messages, oldest first: the stored ones and those this turn added. */
  history: StoredMessage[];
  readonly #settings: MemorySettings;
  readonly #fixed: FixedRequest;
  readonly #now: () => Date;
  /** A failed (or impossible) compaction is not retried within the turn: one summary call per problem. */
  #compacting = true;
  /**
   * Tokens of the next request, kept up to date as messages are added (no re-count per step): the provider's
   * count of the last request plus an estimate of what was added since, else an estimate of it all.
   */
  #tokens: number;
  /** The fingerprint of what every request carries besides the history: the fixed parts and the summary. */
  #fixedPrint: string;
  /** A count the provider reported this turn, not yet stored: it goes with the next append. */
  #unsaved: Calibration | null = null;
  /** Items of the user's memory the next request carries (the block's `user_memory`), in the order of ids. */
  userMemory: readonly MemoryEntry[] = [];
  /** Estimated tokens those items add to the request; `#tokens` counts the request without them. */
  #memoryTokens = 0;
  /** Whether this turn counted a use of what it recalled: once a turn, not once a request. */
  #memoryUsed = false;
  /** The ids of that use, not yet stored: they go with the next append. */
  #unsavedUse: number[] = [];
  /** What the turn's recall found, kept for its later requests until its memory changes; null: ask the store. */
  #found: RecalledItem[] | null = null;
  /** Tokens the block of the first n found items adds to the request, by n. */
  #costs: number[] = [];

  readonly #storage: MemoryStorage;
  constructor(
    state: MemoryState & { calibration?: Calibration | null },
    fixed: FixedRequest,
    settings: MemorySettings,
    now: () => Date,
    storage: MemoryStorage,
  ) {
    this.#storage = storage;
    this.key = state.key;
    this.summary = state.summary;
    this.history = state.history;
    this.#fixed = fixed;
    this.#settings = settings;
    this.#now = now;
    this.#fixedPrint = fingerprint(fixed, state.summary);
    this.#tokens = this.#calibrated(state.calibration ?? null) ?? requestTokens(state, fixed);
  }

  /** The estimate of the next request from `calibration`, or null when it does not describe this history. */
  #calibrated(calibration: Calibration | null): number | null {
    if (calibration === null || calibration.fixed !== this.#fixedPrint) return null;
    const at = calibration.through === null
      ? -1
      : this.history.findLastIndex((m) => m.id === calibration.through);
    if (at === -1 && calibration.through !== null) return null;
    return calibration.tokens + estimateRequestTokens(this.history.slice(at + 1));
  }

  /**
   * Tokens of the next request (system messages, tools, summary and history): the provider's count of the last
   * one plus the estimate of what was added since, else the estimate.
   */
  get requestTokens(): number {
    return this.#tokens + this.#memoryTokens;
  }

  /** The turn stored `messages`: the next request carries them. */
  added(messages: readonly StoredMessage[]): void {
    this.history.push(...messages);
    this.#tokens += estimateRequestTokens(messages);
  }

  /**
   * The provider counted `promptTokens` for the request just sent (the history as it is now): the next
   * estimate starts from that count, and it is kept for the session by {@linkcode TurnMemory.takeCalibration}.
   */
  calibrate(promptTokens: number | null): void {
    if (promptTokens === null || !Number.isFinite(promptTokens) || promptTokens <= 0) return;
    // Kept without the recalled items, which the next request may carry others of (or none).
    this.#tokens = Math.max(1, promptTokens - this.#memoryTokens);
    this.#unsaved = {
      tokens: promptTokens,
      through: this.history.at(-1)?.id ?? null,
      fixed: this.#fixedPrint,
    };
  }

  /** The count not yet stored, once: the loop stores it with its next append. */
  takeCalibration(): Calibration | undefined {
    const calibration = this.#unsaved ?? undefined;
    this.#unsaved = null;
    return calibration;
  }

  /**
   * The before-request hook: compacts when the next request would not fit the token budget (a compaction
   * due by the turn trigger alone waits for {@linkcode TurnMemory.afterAnswer}); null when nothing was due.
   * Never rejects for a summary problem: the result says it failed, and it is not tried again this turn.
   */
  async beforeRequest(signal?: AbortSignal): Promise<CompactionResult | null> {
    if (!this.#compacting || this.#tokens <= this.#settings.maxCtxTokens) return null;
    // Cut by what the provider counts: the estimates scaled to its count of this very request.
    const scale = Math.max(0.25, this.#tokens / Math.max(1, requestTokens(this, this.#fixed)));
    const deps = { ...this.#deps(signal, true), scale };
    const compaction = await compactIfDue(this, this.#fixed, deps);
    if (compaction === null) return null;
    this.summary = compaction.state.summary;
    this.history = compaction.state.history;
    this.#compacting = compaction.event.ok;
    if (compaction.event.ok) {
      this.#tokens = compaction.event.tokens_after;
      this.#fixedPrint = fingerprint(this.#fixed, this.summary);
      this.#unsaved = null;
    }
    return compaction;
  }

  /**
   * The before-request hook of the user's memory, after {@linkcode TurnMemory.beforeRequest}: the items most
   * relevant to the turn's user message, as many as fit the token budget beside the rest of the request (the
   * least relevant go first, so recall shrinks before raw turns are cut), become `userMemory`. Null when memory
   * is off. The store is searched once a turn, and again after {@linkcode TurnMemory.memoryChanged}; the first
   * recall of the turn that finds something counts a use of what it keeps ({@linkcode TurnMemory.takeMemoryUse}).
   */
  async recall(): Promise<Recall | null> {
    const { userMemory = null, maxCtxTokens } = this.#settings;
    if (userMemory === null) return null;
    // The turn's user message is the same at every request: the store is asked again only after a change.
    const asked = this.#found === null;
    if (this.#found === null) {
      const question = this.history.findLast((m) => m.role === "user")?.content ?? "";
      const from = this.#storage.recall;
      if (from === null) {
        throw new TypeError("Cannot recall the user's memory: the turn has no store to read it");
      }
      this.#found = await from.recallMemory(this.key.userId, question, userMemory.recall);
      this.#costs = [];
    }
    const found = this.#found;
    let kept = found.length;
    while (kept > 0 && this.#tokens + this.#blockTokens(kept) > maxCtxTokens) kept--;
    const same = !asked && kept === this.userMemory.length;
    if (!same) {
      // Frozen, so the requests that carry the same items reuse one block (see buildContext).
      const items = found.slice(0, kept).map(({ id, text }) => Object.freeze({ id, text }));
      this.userMemory = Object.freeze(items.sort((a, b) => a.id - b.id));
    }
    this.#memoryTokens = this.#blockTokens(kept);
    if (!this.#memoryUsed && kept > 0) {
      this.#memoryUsed = true;
      this.#unsavedUse = this.userMemory.map((item) => item.id);
    }
    return { found, kept, changed: !same };
  }

  /** The recall's use not yet stored, once: the loop stores it with its next append, in its transaction. */
  takeMemoryUse(): number[] | undefined {
    const used = this.#unsavedUse;
    this.#unsavedUse = [];
    return used.length === 0 ? undefined : used;
  }

  /** The turn wrote to the user's memory (a tool did): the next request recalls from the store again. */
  memoryChanged(): void {
    this.#found = null;
  }

  /**
   * Estimated tokens the first `count` found items add to the request: their block, a message of its own
   * after the history. Kept per count until the store is asked again.
   */
  #blockTokens(count: number): number {
    if (count === 0) return 0;
    return this.#costs[count] ??= estimateMessageTokens({
      role: "system",
      content: runtimeContextText(null, this.#found!.slice(0, count)),
    });
  }

  /**
   * The after-answer hook: starts a compaction due by the turn trigger in the background. It plans on the
   * session as stored when it starts (an earlier compaction or a newer turn may have changed it), and hands
   * what it did to `report` with the sink its events go to (the trace).
   */
  afterAnswer(report: (compaction: CompactionResult, emit: EventSink) => void): void {
    const { maxRawTurns, compactBatch = defaultCompactBatch(maxRawTurns), compactions } = this.#settings;
    const store = this.#storage.reads;
    if (!overTurnLimit(this.history, maxRawTurns, compactBatch)) return;
    const key = this.key;
    compactions.start(key, async (emit, signal) => {
      const session = await store.get(key);
      if (session === null) return; // deleted meanwhile
      const state = { key, summary: session.summary, history: await store.messages(key) };
      const compaction = await compactIfDue(state, this.#fixed, this.#deps(signal, false));
      if (compaction !== null) report(compaction, emit);
    });
  }

  #deps(signal: AbortSignal | undefined, tokensOnly: boolean): CompactionDeps {
    const { summarizer, maxRawTurns, maxCtxTokens } = this.#settings;
    const { compactBatch = defaultCompactBatch(maxRawTurns), userMemory = null } = this.#settings;
    const memoryItems = userMemory?.items ?? null;
    const store = this.#storage.kept;
    const deps = { store, summarizer, maxRawTurns, compactBatch, maxCtxTokens, memoryItems };
    return { ...deps, now: this.#now, signal, tokensOnly };
  }
}

/**
 * A short fingerprint (FNV-1a, 32 bits, hex) of the request's parts besides the history: the system messages,
 * the tools offered and the summary. A calibration counted with other parts does not describe the next request.
 */
function fingerprint(fixed: FixedRequest, summary: string | null): string {
  const contents = fixed.system.map((m) => m.content);
  const last = lastPrint;
  if (
    last !== null && last.tools === fixed.tools && last.summary === summary &&
    last.contents.length === contents.length && last.contents.every((content, i) => content === contents[i])
  ) {
    return last.print;
  }
  const print = fnv1a(JSON.stringify([contents, toolsPrint(fixed.tools), summary]));
  // Only a frozen tool list is known not to change under the same array (see toolsPrint).
  lastPrint = Object.isFrozen(fixed.tools) ? { contents, tools: fixed.tools, summary, print } : null;
  return print;
}

/** The last fingerprint made, with its parts: a session's next turn (and its compactions) has the same ones. */
let lastPrint: {
  contents: readonly (string | null)[];
  tools: readonly ToolSchema[];
  summary: string | null;
  print: string;
} | null = null;

/** The tools' part of a fingerprint, kept per frozen list (the registry's): not serialized every turn. */
const toolsPrints = new WeakMap<readonly ToolSchema[], string>();

function toolsPrint(tools: readonly ToolSchema[]): string {
  const known = toolsPrints.get(tools);
  if (known !== undefined) return known;
  const print = fnv1a(JSON.stringify(tools));
  if (Object.isFrozen(tools)) toolsPrints.set(tools, print);
  return print;
}

/** FNV-1a of `text`, 32 bits, as 8 hex digits. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return (hash >>> 0).toString(16).padStart(8, "0");
}
