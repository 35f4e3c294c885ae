/**
 * `deno task bench`: what the runtime costs around the model. Four sections, each against a fake provider
 * run as its own process on 127.0.0.1:
 *
 * 1. per-turn overhead of the full stack versus a plain-fetch floor sending the same bodies;
 * 2. growth of one long session (time per turn, request size, compaction, the token budget);
 * 3. HTTP throughput of `serve` as a subprocess under 1, 16 and 64 clients, and 16 on one session;
 * 4. memory of the serving process with 1,000 sessions, and start-up of `serve` and `chat`.
 *
 * ```sh
 * deno task bench            # full run, a readable report (a few minutes on 2 cores)
 * deno task bench --quick    # reduced sizes, well under a minute
 * deno task bench --json     # one JSON object on stdout (progress goes to stderr)
 * deno task bench --only overhead,growth   # some sections (e.g. under --cpu-prof)
 * deno task bench --only http --serve-cpu-prof prof   # the serve subprocess writes a CPU profile to prof/
 * ```
 *
 * Times are medians and p95s of samples taken in one run, A and B interleaved by round; ratios come from
 * the same run. Nothing here asserts a time: the targets are reported as met or missed.
 * @module
 */
import { measureRuntimeWork, type WorkResult } from "./_bench_work.ts";
import { parseArgs } from "node:util";
import { cleanUpAll } from "./_bench_process.ts";
import { formatReport } from "./_bench_report.ts";
import { measureMemory, measureStartup, type MemoryResult, type StartupResult } from "./_bench_footprint.ts";
import { type HttpResult, measureHttp } from "./_bench_http.ts";
import { type GrowthResult, measureGrowth, measureOverhead, type OverheadResult } from "./_bench_turns.ts";

export { measureMemory, measureStartup } from "./_bench_footprint.ts";
export { measureHttp } from "./_bench_http.ts";
export { measureGrowth, measureOverhead } from "./_bench_turns.ts";
export type { MemoryResult, StartupResult } from "./_bench_footprint.ts";
export type { HttpResult, HttpRow } from "./_bench_http.ts";
export type { GrowthResult, OverheadResult } from "./_bench_turns.ts";

/** The bench's sections, in the order they run. */
export const SECTIONS = ["overhead", "growth", "http", "memory", "startup"] as const;
/** One section's name. */
export type Section = (typeof SECTIONS)[number];

/** Sizes of a run. */
export interface BenchSizes {
  overhead: { rounds: number; turns: number };
  growth: { turns: number };
  http: { turnsPerClient: number };
  memory: { sessions: number };
  startup: { repeats: number };
}

/** The full run's sizes. */
export const FULL: Readonly<BenchSizes> = {
  overhead: { rounds: 10, turns: 100 },
  growth: { turns: 1000 },
  http: { turnsPerClient: 20 },
  memory: { sessions: 1000 },
  startup: { repeats: 5 },
};

/** The `--quick` run's sizes. */
export const QUICK: Readonly<BenchSizes> = {
  overhead: { rounds: 3, turns: 30 },
  growth: { turns: 200 },
  http: { turnsPerClient: 5 },
  memory: { sessions: 1000 },
  startup: { repeats: 3 },
};

/** Whether each target was met; null when its section did not run. */
export interface Targets {
  /** Per-turn median ≤ 1.3 × the floor's. */
  overhead: boolean | null;
  /** Last-50 median ≤ 1.2 × first-50 median. */
  growth: boolean | null;
  /** The same ratio divided by that of the reference turns interleaved with it (machine drift removed). */
  growthDriftCorrected: boolean | null;
  /** ≥ 90 % of ideal at 16 clients, ≥ 70 % at 64, zero errors. */
  http: boolean | null;
  /** RSS of the serving process < 150 MB with 1,000 sessions. */
  memory: boolean | null;
}

/** Everything one run measured. */
export interface BenchReport {
  mode: "quick" | "full";
  machine: { cores: number; deno: string; v8: string; os: string };
  seconds: number;
  overhead?: OverheadResult;
  /** The runtime's own work per turn, model answered in-process (part of the overhead section). */
  work?: WorkResult;
  growth?: GrowthResult;
  http?: HttpResult;
  memory?: MemoryResult;
  startup?: StartupResult;
  targets: Targets;
}

/** Options of {@linkcode runBench}. */
export interface RunBenchOptions {
  /** Use {@linkcode QUICK} sizes. @default {false} */
  quick?: boolean;
  /** Sections to run. @default {SECTIONS} */
  only?: readonly Section[];
  /** Progress lines. @default {(line) => console.error(line)} */
  progress?: (line: string) => void;
  /** Where the HTTP section's `serve` writes a V8 CPU profile (`--cpu-prof`). @default {undefined} */
  serveCpuProfDir?: string;
}

/** Judges the targets from what ran. Pure. */
export function judgeTargets(report: Omit<BenchReport, "targets">): Targets {
  const { overhead, growth, http, memory } = report;
  const row = (clients: number) => http?.rows.find((r) => r.sessions === "distinct" && r.clients === clients);
  const distinctErrors = http?.rows.filter((r) => r.sessions === "distinct").reduce(
    (n, r) => n + r.errors,
    0,
  );
  const r16 = row(16);
  const r64 = row(64);
  return {
    overhead: overhead === undefined ? null : overhead.ratio <= 1.3,
    growth: growth === undefined ? null : growth.ratio <= 1.2,
    growthDriftCorrected: growth === undefined ? null : growth.driftCorrectedRatio <= 1.2,
    http: http === undefined || r16 === undefined || r64 === undefined
      ? null
      : r16.efficiency >= 0.9 && r64.efficiency >= 0.7 && distinctErrors === 0,
    memory: memory === undefined
      ? null
      : Math.max(memory.afterCreateRssMiB, memory.afterListRssMiB) * 1.048576 < 150,
  };
}

/** Runs the sections and returns the report. Cleans up its processes and folders on every path. */
export async function runBench(options: RunBenchOptions = {}): Promise<BenchReport> {
  const { quick = false, only = SECTIONS, progress = (line: string) => console.error(line) } = options;
  const { serveCpuProfDir } = options;
  const serveFlags = serveCpuProfDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${serveCpuProfDir}`];
  const sizes = quick ? QUICK : FULL;
  const started = performance.now();
  const report: Omit<BenchReport, "targets"> = {
    mode: quick ? "quick" : "full",
    machine: {
      cores: navigator.hardwareConcurrency,
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      os: `${Deno.build.os}-${Deno.build.arch}`,
    },
    seconds: 0,
  };
  const step = async <T>(name: Section, run: () => Promise<T>): Promise<T | undefined> => {
    if (!only.includes(name)) return undefined;
    const t = performance.now();
    progress(`bench: ${name}…`);
    const result = await run();
    progress(`bench: ${name} done in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    return result;
  };
  report.overhead = await step("overhead", () => measureOverhead(sizes.overhead));
  if (report.overhead !== undefined) report.work = await measureRuntimeWork(sizes.overhead);
  report.growth = await step("growth", () => measureGrowth(sizes.growth));
  report.http = await step("http", () => measureHttp({ ...sizes.http, serveFlags }));
  report.memory = await step("memory", () => measureMemory(sizes.memory));
  report.startup = await step("startup", () => measureStartup(sizes.startup));
  report.seconds = (performance.now() - started) / 1000;
  return { ...report, targets: judgeTargets(report) };
}

function parseSections(text: string | undefined): Section[] {
  if (text === undefined) return [...SECTIONS];
  const names = text.split(",").map((s) => s.trim()).filter((s) => s !== "");
  for (const name of names) {
    if (!(SECTIONS as readonly string[]).includes(name)) {
      throw new TypeError(`Unknown section "${name}": expected some of ${SECTIONS.join(", ")}`);
    }
  }
  return names as Section[];
}

const USAGE = `Usage: deno task bench [--quick] [--json] [--only ${
  SECTIONS.join(",")
}] [--serve-cpu-prof DIR]`;

async function main(args: string[]): Promise<number> {
  let values;
  let only: Section[];
  try {
    ({ values } = parseArgs({
      args,
      options: {
        quick: { type: "boolean", default: false },
        json: { type: "boolean", default: false },
        only: { type: "string" },
        "serve-cpu-prof": { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
    only = parseSections(values.only);
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  let interrupted = false;
  const interrupt = () => {
    if (interrupted) return;
    interrupted = true;
    console.error("bench: interrupted, cleaning up");
    cleanUpAll().finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", interrupt);
  Deno.addSignalListener("SIGTERM", interrupt);
  try {
    const report = await runBench({ quick: values.quick, only, serveCpuProfDir: values["serve-cpu-prof"] });
    console.log(values.json ? JSON.stringify(report) : formatReport(report));
    return 0;
  } catch (error) {
    // A section failing because its processes were just stopped is the interruption, not a bug.
    if (interrupted) return 130;
    throw error;
  } finally {
    Deno.removeSignalListener("SIGINT", interrupt);
    Deno.removeSignalListener("SIGTERM", interrupt);
    await cleanUpAll();
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
