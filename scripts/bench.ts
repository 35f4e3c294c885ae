/** `deno task bench [--quick] [--json] [--only SECTIONS]`: the runtime's cost around the model. @module */
import { parseArgs } from "node:util";
import { cleanUpAll, type Distribution } from "./_bench_process.ts";
import {
  type HttpResult,
  measureHttp,
  measureMemory,
  measureStartup,
  measureSustained,
  type MemoryResult,
  type StartupResult,
} from "./_bench_serve.ts";
import {
  type GrowthResult,
  measureGrowth,
  measureOverhead,
  measureRuntimeWork,
  type OverheadResult,
  type WorkResult,
} from "./_bench_turns.ts";
import { measureHttpPostgres } from "./_bench_postgres.ts";
import { measureTokens, type TokensResult } from "./_bench_tokens.ts";
import { type CacheResult, measureCache } from "./_bench_cache.ts";
import { measureRecall, type RecallResult } from "./_bench_memory.ts";

export { measureHttp, measureMemory, measureStartup, measureSustained } from "./_bench_serve.ts";
export { measureGrowth, measureOverhead, measureRuntimeWork, openBenchRuntime } from "./_bench_turns.ts";
export { measureRecall } from "./_bench_memory.ts";

const HELP = `Usage: deno task bench [--quick] [--json]
                        [--only overhead,recall,growth,http,http-postgres,sustained,memory,startup,tokens,cache]
                        [--latency-ms N]

  --quick       reduced sizes (about 4 min on 2 cores; the full run takes about 11 min)
  --json        one JSON object on stdout; progress goes to stderr
  --only        run some sections, e.g. --only http
  --latency-ms  the model's latency of the second overhead run (default 20; the first runs at 0)

Every section runs against a fake OpenAI-compatible provider in its own process on 127.0.0.1
(scripts/_fake_provider.ts), so its CPU is not the runtime's. It answers by rule: a calculator call
for arithmetic, an answer quoting a tool result, a valid summary for a compaction request, with usage;
in the HTTP section after a fixed 50 ms.

1. Per-turn overhead. One calculator turn is two model calls. A is runTurn on the real stack (SQLite
   file in WAL mode, trace file, fetch client, streaming off, compaction when due). B is the floor: a
   plain fetch loop replaying the very request bodies A sent, reading each reply with json() and nothing
   else — two loopback round trips. C is B also replaying the summary calls A chose to make. D is A
   persisting nothing (store in :memory:, no trace file): D against B is the runtime's work beyond the
   writes. E is an agent loop written by hand with fetch (messages in an array, JSON.stringify, json(),
   the calculator in place; no store, trace, events, limits or compaction): A/E is the price of the rest. An unmeasured round records the bodies and warms every path; then each round runs A, D, B, C
   over the same turns, A and D on a fresh session, so drift hits all four alike. Ratios are of medians
   from the same run. Past AGENT_MAX_RAW_TURNS + AGENT_COMPACT_BATCH turns a compaction folds the batch
   into the summary after the answer, in the background: "besideCompaction" are the turns it ran beside,
   "plain" the others. The section runs twice: the model answering at once, and after --latency-ms.
1b. The runtime's own work: the same turns with the model answered inside the process (no socket), the
   stub's own time subtracted, and the bench's own bookkeeping (the bodies sent are classified after the
   turn). Far less noisy than a loopback round trip; in microseconds. Nothing yields to a timer there, so
   each background compaction runs after its turn and is timed on its own.
1c. Recall of the user's memory. One SQLite database with 1,000 users of 200 items each (100 users with
   --quick), then calculator turns of those users, the model in-process as in 1b, in turn with
   AGENT_USER_MEMORY on, with recall alone off (remember and forget still offered) and off: the runtime's
   own work per turn each way (µs), what recall adds (on against recall off, the target's figure) and what
   memory adds (on against off), each as a share of the turn without it; and the recall query alone.
2. Growth. One session of 1,000 turns (200 with --quick) at the default thresholds: median time of the
   last 50 turns against the first 50, request bytes, summary calls, model requests per turn (chat and
   summary calls) over the first 200 turns, and the largest request by the runtime's own token estimate
   against AGENT_MAX_CTX_TOKENS. requestPrefix: of all the session's chat request bytes, the share that
   repeats the previous request's prefix (the longest common prefix of consecutive bodies), what a
   provider's prompt cache can find again; withTools also counts the unchanged tool list, which the body
   carries after the messages but providers read first. After every turn a reference turn runs
   (turns 1-10 of short sessions, which never compact); "corrected for drift" divides by how those
   reference turns moved, to tell a slower machine from a growing session.
3. HTTP. serve as a subprocess with the task's own permission flags. 1, 16 and 64 clients, each on its
   own session doing sequential turns; ideal = clients / (2 x 50 ms), efficiency = turns/s / ideal. The
   floor is the same clients sending a turn's two requests straight to the provider, run right after.
   Then 16 clients on one session: turns queue per session and the 9th waiting gets 429 + Retry-After,
   which the clients honour (turn latency counts those waits). One JS thread serves every client: at
   64 clients it, not the model, is what saturates. serve must exit 0 on SIGTERM. Each load's VmRSS of
   serve: its peak during the load (VmHWM, reset before it) and 1 s after the floor run that follows;
   without --quick also after 30 s idle at the end (V8 returns memory about 25 s after a load).
3b. HTTP on PostgreSQL. The same distinct-session load (no shared session) with AGENT_DATABASE_URL on a
   throwaway local cluster (tests/_postgres.ts: initdb, fsync off), with one serve and with two (clients
   spread over both, one database), beside SQLite run just before: turns/s and p99 per client count.
   Skipped, saying why, where no cluster can be started.
3c. Sustained load. 64 clients for 5 minutes (30 s with --quick), 20 of them on one session (its 429s
   wait for Retry-After), the rest on one session each, the provider at 50 ms: turns/s, errors, VmRSS
   read 10 times on the way (a figure that rises with run length shows there), its peak (VmHWM) over the
   whole load, and VmRSS 30 s after the load ended.
4. Memory: VmRSS of serve idle, after 1,000 sessions created through it, and after listing them (the
   target reads the larger, in MB). Start-up: spawn to the first /healthz 200 of serve, and to the
   first answer line of a piped chat (deno task starts scripts/launch.ts, which derives the flags and runs it).
5. Token counts. Requests of five conversations (English, Chinese, mixed, JSON tool results, code),
   counted exactly with o200k_base (js-tiktoken, as AGENT_TOKENIZER loads it), against characters / 4,
   the runtime's per-script estimate, its calibrated count (the previous request's exact count plus the
   estimate of what was added) and that count with AGENT_TOKENIZER=o200k_base (what was added counted
   exactly): error in %, median and largest, first and later calls.
6. Prompt cache. One session of 200 turns (40 with --quick) in each wire format (LLM_API chat, anthropic,
   responses), compaction on, against an in-process fake that counts cached tokens by the provider's rules
   (Messages: read only up to an earlier request's breakpoint, looking back 20 blocks, written at each of
   1,024 tokens or more; Chat Completions and Responses: the longest earlier prefix of the same cache key,
   1,024 tokens or more, in steps of 128): the share of input tokens read from the cache after turn 2, the
   input dollars per turn at public prices (claude-sonnet-4-5 3/0.30/3.75, gpt-5 1.25/0.125), the same
   for a client without breakpoints or cache key, compactions, and requests under half cached.

Noise: figures are medians and p95s of one run, on a shared machine; compare runs, not single numbers.
Nothing asserts a time: the targets (per-turn <= 1.2x the floor at 0 ms and <= 1.05x at 20 ms, model
requests per turn <= 2.15, recall < 10% of the runtime's own work per turn, growth <= 1.1x, HTTP >= 90% of ideal at 16 clients and >= 80% at 64 with zero
errors, serve RSS <= 150 MB during and after the 64 clients and with 1,000 sessions, and over the sustained
load <= 200 MiB at its peak and <= 120 MiB 30 s after, the prompt cache >= 90% of input tokens in every
format with at most one request under half cached per compaction) are reported as met or missed.`;

const SECTIONS = [
  "overhead",
  "recall",
  "growth",
  "http",
  "http-postgres",
  "sustained",
  "memory",
  "startup",
  "tokens",
  "cache",
] as const;
type Section = (typeof SECTIONS)[number];
const ONLY = { type: "string", default: SECTIONS.join(",") } as const;
const SIGNALS = ["SIGINT", "SIGTERM"] as const;
const BOOL = { type: "boolean" } as const;
const LATENCY = { type: "string", default: "20" } as const;
const FLAGS = {
  quick: BOOL,
  json: BOOL,
  help: { ...BOOL, short: "h" },
  only: ONLY,
  "latency-ms": LATENCY,
} as const;
// Over 31 turns, so that the default thresholds (20 raw turns, batches of 10) compact at least once.
const SIZES = {
  full: {
    rounds: 10,
    latencyRounds: 3,
    turns: 100,
    growth: 1000,
    turnsPerClient: 20,
    repeats: 5,
    sustainedMs: 300_000,
    recallUsers: 1000,
  },
  quick: {
    rounds: 3,
    latencyRounds: 1,
    turns: 40,
    growth: 200,
    turnsPerClient: 5,
    repeats: 3,
    sustainedMs: 30_000,
    recallUsers: 100,
  },
};

/** Everything one run measured, and whether each target was met (null: its section did not run). */
export interface BenchReport {
  mode: "quick" | "full";
  machine: string;
  seconds: number;
  overhead?: OverheadResult;
  /** The same at the model latency of `--latency-ms`. */
  overheadAtLatency?: OverheadResult;
  work?: WorkResult;
  /** What recalling the user's memory adds to the runtime's own work per turn. */
  recall?: RecallResult;
  growth?: GrowthResult;
  http?: HttpResult;
  /** The HTTP load with sessions in PostgreSQL, 1 and 2 replicas, beside SQLite. */
  httpPostgres?: Awaited<ReturnType<typeof measureHttpPostgres>>;
  /** 64 clients (20 on one session) for 5 minutes: VmRSS on the way, at its peak and 30 s after. */
  sustained?: Awaited<ReturnType<typeof measureSustained>>;
  memory?: MemoryResult;
  startup?: StartupResult;
  /** How far each way of counting a request's tokens is from o200k_base, per class of text. */
  tokens?: TokensResult;
  /** The prompt cache's share of input tokens in a long session, per wire format. */
  cache?: CacheResult;
  targets: Record<
    | "overhead"
    | "overheadAtLatency"
    | "requestsPerTurn"
    | "recall"
    | "growth"
    | "http"
    | "httpRss"
    | "sustainedRss"
    | "memory"
    | "cache",
    boolean | null
  >;
}

/** Judges the targets from what ran. Pure. */
export function judgeTargets(report: Omit<BenchReport, "targets">): BenchReport["targets"] {
  const { overhead, overheadAtLatency, recall, growth, http, sustained, memory, cache } = report;
  const row = (n: number) => http?.rows.find((r) => r.sessions === "distinct" && r.clients === n);
  const errors = http?.rows.filter((r) => r.sessions === "distinct").reduce((n, r) => n + r.errors, 0);
  const [r16, r64] = [row(16), row(64)];
  const underMB = (...mib: number[]) => Math.max(...mib) * 1.048576 <= 150;
  return {
    overhead: overhead ? overhead.ratio <= 1.2 : null,
    overheadAtLatency: overheadAtLatency ? overheadAtLatency.ratio <= 1.05 : null,
    requestsPerTurn: growth ? growth.modelRequestsPerTurn <= 2.15 : null,
    recall: recall ? recall.recallCostRatio < 0.1 : null,
    growth: growth ? growth.driftCorrectedRatio <= 1.1 : null,
    http: r16 && r64 ? r16.efficiency >= 0.9 && r64.efficiency >= 0.8 && errors === 0 : null,
    httpRss: r64 ? underMB(r64.rssPeakMiB, r64.rssAfterMiB) : null,
    sustainedRss: sustained
      ? sustained.peakRssMiB <= 200 && sustained.idleRssMiB <= 120 && sustained.errors === 0
      : null,
    memory: memory ? underMB(memory.afterCreateRssMiB, memory.afterListRssMiB) : null,
    cache: cache
      ? cache.rows.every((row) => row.cachedShare >= 0.9 && row.uncachedRequests <= row.compactions)
      : null,
  };
}

/** Runs the sections and returns the report; cleans up its processes and folders on every path. */
export async function runBench(
  quick: boolean,
  only: readonly Section[] = SECTIONS,
  latencyMs = 20,
): Promise<BenchReport> {
  const size = quick ? SIZES.quick : SIZES.full;
  const started = performance.now();
  const step = async <T>(name: Section, run: () => Promise<T>, label: string = name) => {
    if (!only.includes(name)) return undefined;
    const t = performance.now();
    console.error(`bench: ${label}…`);
    const result = await run();
    console.error(`bench: ${label} done in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    return result;
  };
  const [cores, os] = [navigator.hardwareConcurrency, `${Deno.build.os}-${Deno.build.arch}`];
  const report: Omit<BenchReport, "targets"> = {
    mode: quick ? "quick" : "full",
    machine: `Deno ${Deno.version.deno}, V8 ${Deno.version.v8}, ${os}, ${cores} cores`,
    seconds: 0,
    overhead: await step("overhead", () => measureOverhead(size)),
    overheadAtLatency: await step(
      "overhead",
      () => measureOverhead({ rounds: size.latencyRounds, turns: size.turns, latencyMs }),
      `overhead at ${latencyMs} ms`,
    ),
    work: only.includes("overhead") ? await measureRuntimeWork(size) : undefined,
    recall: await step(
      "recall",
      () => measureRecall({ users: size.recallUsers, rounds: size.rounds, turns: size.turns }),
    ),
    growth: await step("growth", () => measureGrowth({ turns: size.growth })),
    http: await step(
      "http",
      () => measureHttp({ turnsPerClient: size.turnsPerClient, idleMs: quick ? 0 : 30_000 }),
    ),
    httpPostgres: await step(
      "http-postgres",
      () => measureHttpPostgres({ turnsPerClient: size.turnsPerClient }),
    ),
    sustained: await step("sustained", () => measureSustained({ durationMs: size.sustainedMs })),
    memory: await step("memory", () => measureMemory()),
    startup: await step("startup", () => measureStartup({ repeats: size.repeats })),
    tokens: await step("tokens", () => measureTokens(quick ? 8 : 12)),
    cache: await step("cache", () => measureCache(quick ? 40 : 200)),
  };
  report.seconds = (performance.now() - started) / 1000;
  return { ...report, targets: judgeTargets(report) };
}

const LABELS: Record<string, string> = {
  overhead:
    "1. Per-turn overhead, ms (A = runtime, B = floor, C = floorWithSummaries, D = inMemory, E = plainLoop)",
  overheadAtLatency: "1. Per-turn overhead at the model latency of --latency-ms, ms (as above)",
  work: "1b. The runtime's own work, µs per turn (model in-process, its own time taken out)",
  recall: "1c. Recall of the user's memory: the runtime's own work per turn with it and without, µs",
  growth: "2. Growth of one long session (ms per turn, bytes, estimated tokens)",
  http: "3. HTTP: serve as a subprocess (turns/s, ms; efficiency = of ideal)",
  httpPostgres: "3b. HTTP with sessions in PostgreSQL, 1 and 2 replicas, beside SQLite (turns/s, p99 ms)",
  sustained: "3c. Sustained load on serve: 64 clients, 20 on one session (VmRSS in MiB, on the way at s)",
  memory: "4a. Memory: VmRSS of serve, MiB",
  startup: "4b. Start-up, ms (medians)",
  tokens: "5. Token counts against o200k_base, error in % (median and largest absolute; count)",
  cache:
    "6. Prompt cache over one long session, compaction on: share of input tokens read after turn 2, $ per turn",
  targets: "Targets (true = met)",
};

function round(value: number): number {
  return Math.abs(value) >= 100 ? Math.round(value) : Math.round(value * 1000) / 1000;
}

/** One line per leaf of `value`, a distribution as its median, p95 and count. */
function leaves(value: unknown, key: string, out: string[]): void {
  const d = value as Distribution;
  if (typeof d?.median === "number" && typeof d.p95 === "number") {
    out.push(`  ${key.padEnd(46)} median ${round(d.median)}  p95 ${round(d.p95)}  (${d.count})`);
  } else if (Array.isArray(value) && value.every((v) => typeof v === "number")) {
    out.push(`  ${key.padEnd(46)} ${value.map(round).join(" ")}`);
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) leaves(v, key === "" ? k : `${key}.${k}`, out);
  } else out.push(`  ${key.padEnd(46)} ${typeof value === "number" ? round(value) : String(value)}`);
}

/** The report as text: every figure of each section that ran, labelled by its name, then the targets. */
export function formatReport(report: BenchReport): string {
  const out = [
    `mini-runtime-agent bench (${report.mode}): ${report.machine}, ${report.seconds.toFixed(1)} s`,
  ];
  for (const [section, label] of Object.entries(LABELS)) {
    let value = report[section as keyof BenchReport] as unknown;
    if (value === undefined) continue;
    if (section === "http") {
      const { rows, ...rest } = value as HttpResult;
      value = {
        ...rest,
        ...Object.fromEntries(rows.map((r) => [`${r.clients} clients, ${r.sessions} session(s)`, r])),
      };
    }
    out.push("", label);
    leaves(value, "", out);
  }
  return out.join("\n");
}

async function main(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({ args, options: FLAGS }));
  } catch (error) {
    console.error(`${(error as Error).message}\nRun with --help for usage.`);
    return 2;
  }
  if (values.help) return console.log(HELP), 0;
  const only = values.only.split(",").map((name) => name.trim()).filter((name) => name !== "");
  const unknown = only.filter((name) => !(SECTIONS as readonly string[]).includes(name));
  if (unknown.length > 0) {
    console.error(`Unknown section "${unknown[0]}": expected some of ${SECTIONS.join(", ")}`);
    return 2;
  }
  const latencyMs = Number(values["latency-ms"]);
  if (!/^\d+$/.test(values["latency-ms"]) || latencyMs > 10_000) {
    console.error(`Invalid --latency-ms "${values["latency-ms"]}": expected whole milliseconds, 0 to 10000`);
    return 2;
  }
  let interrupted = false;
  const interrupt = () => {
    if (interrupted) return;
    interrupted = true;
    console.error("bench: interrupted, cleaning up");
    cleanUpAll().finally(() => Deno.exit(130));
  };
  for (const signal of SIGNALS) Deno.addSignalListener(signal, interrupt);
  try {
    const report = await runBench(values.quick ?? false, only as Section[], latencyMs);
    console.log(values.json ? JSON.stringify(report) : formatReport(report));
    return 0;
  } catch (error) {
    if (interrupted) return 130; // a section failing because its processes were just stopped
    throw error;
  } finally {
    for (const signal of SIGNALS) Deno.removeSignalListener(signal, interrupt);
    await cleanUpAll();
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
