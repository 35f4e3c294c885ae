/**
 * The bench's in-process measurements: the per-turn overhead of the full stack against a plain-fetch floor
 * (interleaved by round), and the growth of one long session. Both run against a 0-latency provider
 * process, so what they time is the runtime and the loopback round trips, not a model.
 * @module
 */
import {
  byteLength,
  estimateBodyTokens,
  floorTurn,
  openBenchRuntime,
  type SentRequest,
} from "./_bench_runtime.ts";
import { makeTempDir, startProvider } from "./_bench_process.ts";
import { type Distribution, distribution, median } from "./_bench_stats.ts";

/** The user message of turn `i` (from 0): arithmetic, so each turn is a calculator turn with two calls. */
export function turnMessage(i: number): string {
  return `what is ${i + 1}*(3+4)?`;
}

/** Options of {@linkcode measureOverhead}. */
export interface OverheadOptions {
  /** Rounds of A (runtime), D (runtime persisting nothing), B and C (floors). @default {10} */
  rounds?: number;
  /** Turns per round, each round on a fresh session. @default {100} */
  turns?: number;
}

/** What {@linkcode measureOverhead} measured; times in milliseconds per turn. */
export interface OverheadResult {
  rounds: number;
  turnsPerRound: number;
  session: "fresh per round";
  /** A: `runTurn` through the full stack. */
  runtime: Distribution;
  /** B: the same two chat requests per turn, replayed by a plain fetch loop. */
  floor: Distribution;
  /** C: every request the runtime sent in that turn (the summary call too, when it compacted), replayed. */
  floorWithSummaries: Distribution;
  /**
   * D: the same turns through the same stack with nothing persisted (the store in `:memory:`, no trace
   * file): what the runtime costs beyond the floor before a single write reaches the disk.
   */
  inMemory: Distribution;
  /** median D / median B */
  inMemoryRatio: number;
  /** median A / median B */
  ratio: number;
  /** p95 A / p95 B */
  p95Ratio: number;
  /** median A / median C: the runtime's cost beyond the model calls it chose to make. */
  ratioWithSummaries: number;
  /** Turns 1..AGENT_MAX_RAW_TURNS of each round (no compaction due): A, B, D and the ratios to B. */
  beforeCompaction: {
    runtime: Distribution;
    floor: Distribution;
    ratio: number;
    inMemory: Distribution;
    inMemoryRatio: number;
  };
  /** Turns after AGENT_MAX_RAW_TURNS (a compaction every turn): A, B and their ratio. */
  afterCompaction: { runtime: Distribution; floor: Distribution; ratio: number };
  /** median A / median B of each round. */
  roundRatios: number[];
  /** Summary calls the runtime made per round. */
  summaryCallsPerRound: number;
}

function ratioOf(
  a: Distribution,
  b: Distribution,
): { runtime: Distribution; floor: Distribution; ratio: number } {
  return { runtime: a, floor: b, ratio: a.median / b.median };
}

/**
 * Per-turn overhead: a calculator turn through the full stack (A) versus a plain fetch loop sending the same
 * bodies (B, and C with the summary calls), and the full stack persisting nothing (D). One unmeasured round
 * on its own session records the bodies and warms every path up; then each round runs A, D, B and C over
 * `turns` turns, A and D on fresh sessions.
 */
export async function measureOverhead(options: OverheadOptions = {}): Promise<OverheadResult> {
  const { rounds = 10, turns = 100 } = options;
  if (!Number.isInteger(rounds) || rounds < 1) throw new RangeError(`rounds must be >= 1, got ${rounds}`);
  if (!Number.isInteger(turns) || turns < 1) throw new RangeError(`turns must be >= 1, got ${turns}`);
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-overhead-");
  cleanup.defer(() => temp.remove());
  const runtime = openBenchRuntime(temp.path, provider.url);
  cleanup.defer(() => runtime.close());
  const volatile = openBenchRuntime(temp.path, provider.url, { persist: false });
  cleanup.defer(() => volatile.close());
  const captured: SentRequest[][] = [];
  for (let i = 0; i < turns; i++) {
    const result = await runtime.turn("capture", turnMessage(i));
    if (result.outcome !== "answered") throw new Error(`The capture turn ${i + 1} ended ${result.outcome}`);
    captured.push(runtime.takeRequests());
  }
  const chat = captured.map((sent) => sent.filter((r) => !r.summary).map((r) => r.body));
  const all = captured.map((sent) => sent.map((r) => r.body));
  const compacting = captured.map((sent) => sent.some((r) => r.summary));
  chat.forEach((bodies, i) => {
    if (bodies.length !== 2) throw new Error(`Turn ${i + 1} sent ${bodies.length} chat requests, not 2`);
  });
  for (const bodies of chat) await floorTurn(runtime.url, bodies);
  for (let i = 0; i < turns; i++) await volatile.turn("capture", turnMessage(i));
  volatile.takeRequests();

  const a: number[][] = [];
  const b: number[][] = [];
  const c: number[][] = [];
  const d: number[][] = [];
  let summaryCalls = 0;
  for (let r = 0; r < rounds; r++) {
    const ra: number[] = [];
    const rb: number[] = [];
    const rc: number[] = [];
    const rd: number[] = [];
    for (let i = 0; i < turns; i++) {
      const started = performance.now();
      const result = await runtime.turn(`round-${r}`, turnMessage(i));
      ra.push(performance.now() - started);
      if (result.outcome !== "answered") throw new Error(`Round ${r + 1} turn ${i + 1}: ${result.outcome}`);
      summaryCalls += runtime.takeRequests().filter((s) => s.summary).length;
    }
    for (let i = 0; i < turns; i++) {
      const started = performance.now();
      const result = await volatile.turn(`round-${r}`, turnMessage(i));
      rd.push(performance.now() - started);
      if (result.outcome !== "answered") {
        throw new Error(`Round ${r + 1} turn ${i + 1} (D): ${result.outcome}`);
      }
      volatile.takeRequests();
    }
    for (let i = 0; i < turns; i++) {
      const started = performance.now();
      await floorTurn(runtime.url, chat[i]);
      rb.push(performance.now() - started);
    }
    for (let i = 0; i < turns; i++) {
      const started = performance.now();
      await floorTurn(runtime.url, all[i]);
      rc.push(performance.now() - started);
    }
    a.push(ra);
    b.push(rb);
    c.push(rc);
    d.push(rd);
  }
  const flat = (rows: number[][], keep: (i: number) => boolean = () => true) =>
    rows.flatMap((row) => row.filter((_, i) => keep(i)));
  const runtimeAll = distribution(flat(a));
  const floorAll = distribution(flat(b));
  const floorSummaries = distribution(flat(c));
  const inMemory = distribution(flat(d));
  const before = (i: number) => !compacting[i];
  const inMemoryBefore = distribution(flat(d, before));
  const floorBefore = distribution(flat(b, before));
  return {
    rounds,
    turnsPerRound: turns,
    session: "fresh per round",
    runtime: runtimeAll,
    floor: floorAll,
    floorWithSummaries: floorSummaries,
    inMemory,
    inMemoryRatio: inMemory.median / floorAll.median,
    ratio: runtimeAll.median / floorAll.median,
    p95Ratio: runtimeAll.p95 / floorAll.p95,
    ratioWithSummaries: runtimeAll.median / floorSummaries.median,
    beforeCompaction: {
      ...ratioOf(distribution(flat(a, before)), floorBefore),
      inMemory: inMemoryBefore,
      inMemoryRatio: inMemoryBefore.median / floorBefore.median,
    },
    afterCompaction: ratioOf(
      distribution(flat(a, (i) => compacting[i])),
      distribution(flat(b, (i) => compacting[i])),
    ),
    roundRatios: a.map((row, r) => median(row) / median(b[r])),
    summaryCallsPerRound: summaryCalls / rounds,
  };
}

/** Turns of each short reference session: few enough that no compaction is ever due. */
const REFERENCE_TURNS = 10;

/** Options of {@linkcode measureGrowth}. */
export interface GrowthOptions {
  /** Turns of the one session. @default {1000} */
  turns?: number;
}

/** What {@linkcode measureGrowth} measured; times in milliseconds per turn. */
export interface GrowthResult {
  turns: number;
  /** Size of the first and last windows compared (50, or half the turns when fewer than 100). */
  window: number;
  firstMedianMs: number;
  lastMedianMs: number;
  /** lastMedianMs / firstMedianMs */
  ratio: number;
  /** Median of the turns before any compaction was due, and of the rest of the first window. */
  beforeCompactionMedianMs: number;
  /** lastMedianMs / beforeCompactionMedianMs: the long session against its cheapest turns. */
  ratioVsBeforeCompaction: number;
  /**
   * After every turn of the long session, one reference turn (turns 1–10 of short sessions, in rotation):
   * medians of those run during the first and the last window. They show how the machine itself drifted.
   */
  referenceFirstMedianMs: number;
  referenceLastMedianMs: number;
  /** lastMedianMs / referenceLastMedianMs: the last turns against turns 1–10 measured at the same time. */
  lastVsReference: number;
  /** `ratio` without the drift: (last / reference last) / (first / reference first), of the medians. */
  driftCorrectedRatio: number;
  firstWindowCompactingMedianMs: number;
  /** UTF-8 bytes of each chat request (the tool-call one, then the answer one) at turn 1 and the last. */
  requestBytesFirstTurn: number[];
  requestBytesLastTurn: number[];
  /** Summary calls, counted by the provider, and the compactions the trace recorded. */
  summaryCalls: number;
  compactions: { ok: number; failed: number };
  /** The runtime's own estimate of the last request and the largest one, against the budget. */
  lastRequestTokens: number;
  maxRequestTokens: number;
  maxCtxTokens: number;
  underBudget: boolean;
  dbBytes: number;
  traceBytes: number;
}

function fileSize(path: string): number {
  try {
    return Deno.statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * One session of `turns` calculator turns with the default thresholds: how per-turn cost and size evolve.
 * Each of its turns is followed by a reference turn on a short session, so that drift of the machine over
 * the run can be told apart from growth of the session.
 */
export async function measureGrowth(options: GrowthOptions = {}): Promise<GrowthResult> {
  const { turns = 1000 } = options;
  if (!Number.isInteger(turns) || turns < 2) throw new RangeError(`turns must be >= 2, got ${turns}`);
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-growth-");
  cleanup.defer(() => temp.remove());
  const runtime = openBenchRuntime(temp.path, provider.url);
  cleanup.defer(() => runtime.close());
  // Warm the code paths on another session, so turn 1 is not the JIT's first sight of them.
  for (let i = 0; i < 5; i++) await runtime.turn("warmup", turnMessage(i));
  runtime.takeRequests();
  const before = await provider.stats();
  const compactionsBefore = { ...runtime.compactions };
  const times: number[] = [];
  const reference: number[] = [];
  const compacted: boolean[] = [];
  let first: number[] = [];
  let last: number[] = [];
  let lastTokens = 0;
  let maxTokens = 0;
  for (let i = 0; i < turns; i++) {
    const started = performance.now();
    const result = await runtime.turn("growth", turnMessage(i));
    times.push(performance.now() - started);
    if (result.outcome !== "answered") throw new Error(`Growth turn ${i + 1} ended ${result.outcome}`);
    const sent = runtime.takeRequests();
    compacted.push(sent.some((s) => s.summary));
    const chat = sent.filter((s) => !s.summary).map((s) => s.body);
    if (i === 0) first = chat.map(byteLength);
    if (i === turns - 1) last = chat.map(byteLength);
    const tokens = Math.max(...chat.map(estimateBodyTokens));
    maxTokens = Math.max(maxTokens, tokens);
    lastTokens = tokens;

    const referenceStarted = performance.now();
    await runtime.turn(`reference-${Math.floor(i / REFERENCE_TURNS)}`, turnMessage(i % REFERENCE_TURNS));
    reference.push(performance.now() - referenceStarted);
    runtime.takeRequests();
  }
  const after = await provider.stats();
  const window = Math.min(50, Math.floor(turns / 2));
  const head = times.slice(0, window);
  const firstMedianMs = median(head);
  const lastMedianMs = median(times.slice(-window));
  const referenceFirstMedianMs = median(reference.slice(0, window));
  const referenceLastMedianMs = median(reference.slice(-window));
  const { maxCtxTokens } = runtime.config;
  return {
    turns,
    window,
    firstMedianMs,
    lastMedianMs,
    ratio: lastMedianMs / firstMedianMs,
    beforeCompactionMedianMs: median(head.filter((_, i) => !compacted[i])),
    ratioVsBeforeCompaction: lastMedianMs / median(head.filter((_, i) => !compacted[i])),
    firstWindowCompactingMedianMs: median(head.filter((_, i) => compacted[i])),
    referenceFirstMedianMs,
    referenceLastMedianMs,
    lastVsReference: lastMedianMs / referenceLastMedianMs,
    driftCorrectedRatio: (lastMedianMs / referenceLastMedianMs) / (firstMedianMs / referenceFirstMedianMs),
    requestBytesFirstTurn: first,
    requestBytesLastTurn: last,
    summaryCalls: after.summary - before.summary,
    compactions: {
      ok: runtime.compactions.ok - compactionsBefore.ok,
      failed: runtime.compactions.failed - compactionsBefore.failed,
    },
    lastRequestTokens: lastTokens,
    maxRequestTokens: maxTokens,
    maxCtxTokens,
    underBudget: maxTokens <= maxCtxTokens,
    dbBytes: fileSize(runtime.dbPath) + fileSize(`${runtime.dbPath}-wal`),
    traceBytes: fileSize(runtime.tracePath),
  };
}
