/**
 * Profiling helpers for the bench, two subcommands:
 *
 * ```sh
 * # the runtime's turns alone (no floor in the profile), under V8's sampling profiler
 * deno run -A --cpu-prof --cpu-prof-dir=prof scripts/_bench_profile.ts turns 3000 [--per-session 100]
 * # where the time went: self and total time by function and self time by file, from a .cpuprofile
 * deno run -A scripts/_bench_profile.ts summarize prof/CPU.*.cpuprofile [--top 25] [--timeline 500] \\
 *   [--window FROM_MS,TO_MS]
 * ```
 * @module
 */
import { parseArgs } from "node:util";
import { makeTempDir, startProvider } from "./_bench_process.ts";
import { openBenchRuntime } from "./_bench_runtime.ts";
import { table } from "./_bench_stats.ts";
import { turnMessage } from "./_bench_turns.ts";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Time per key, in milliseconds, with its share of the whole profile. */
export interface ProfileLine {
  key: string;
  ms: number;
  share: number;
}

/** A profile's time: self and total by function, self by file. */
export interface ProfileSummary {
  totalMs: number;
  selfByFunction: ProfileLine[];
  totalByFunction: ProfileLine[];
  selfByFile: ProfileLine[];
}

function shortUrl(url: string): string {
  if (url === "") return "(native)";
  const repo = url.indexOf("/work/main/");
  if (repo >= 0) return url.slice(repo + "/work/main/".length);
  return url.replace(/^ext:/, "ext:");
}

function functionKey(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const name = functionName === "" ? "(anonymous)" : functionName;
  return url === "" ? name : `${name} ${shortUrl(url)}:${lineNumber + 1}`;
}

/** Options of {@linkcode summarizeProfile}. */
export interface SummarizeOptions {
  /**
   * Only the samples from `from` to `to` milliseconds after the profile's start (e.g. one load phase).
   * @default {[0, Infinity]}
   */
  window?: [number, number];
}

/** The share of non-idle samples in each `binMs` slice of the profile: where the process was busy. */
export function busyTimeline(profile: CpuProfile, binMs: number): number[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const busy: number[] = [];
  const all: number[] = [];
  let t = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    t += dt;
    const bin = Math.floor(t / 1000 / binMs);
    all[bin] = (all[bin] ?? 0) + dt;
    if (byId.get(id)!.callFrame.functionName !== "(idle)") busy[bin] = (busy[bin] ?? 0) + dt;
  });
  return Array.from(all, (total, i) => (total ? (busy[i] ?? 0) / total : 0));
}

/** Sums a V8 `.cpuprofile`'s samples by function (self and total) and by file (self). Pure. */
export function summarizeProfile(profile: CpuProfile, options: SummarizeOptions = {}): ProfileSummary {
  const { window = [0, Infinity] } = options;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  const file = new Map<string, number>();
  let totalUs = 0;
  let clock = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    clock += dt;
    if (clock / 1000 < window[0] || clock / 1000 > window[1]) return;
    totalUs += dt;
    const node = byId.get(id)!;
    const key = functionKey(node);
    self.set(key, (self.get(key) ?? 0) + dt);
    const url = shortUrl(node.callFrame.url);
    file.set(url, (file.get(url) ?? 0) + dt);
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const k = functionKey(byId.get(at)!);
      if (seen.has(k)) continue;
      seen.add(k);
      total.set(k, (total.get(k) ?? 0) + dt);
    }
  });
  const lines = (map: Map<string, number>) =>
    [...map].map(([key, us]) => ({ key, ms: us / 1000, share: us / totalUs })).sort((a, b) => b.ms - a.ms);
  return {
    totalMs: totalUs / 1000,
    selfByFunction: lines(self),
    totalByFunction: lines(total),
    selfByFile: lines(file),
  };
}

function printSummary(path: string, summary: ProfileSummary, top: number): void {
  const rows = (lines: ProfileLine[]) =>
    lines.slice(0, top).map((l) => [l.key, Math.round(l.ms), `${(l.share * 100).toFixed(1)}%`]);
  console.log(`${path}: ${Math.round(summary.totalMs)} ms sampled`);
  console.log("\nself time by function\n" + table(["function", "ms", "share"], rows(summary.selfByFunction)));
  console.log(
    "\ntotal time by function\n" + table(["function", "ms", "share"], rows(summary.totalByFunction)),
  );
  console.log("\nself time by file\n" + table(["file", "ms", "share"], rows(summary.selfByFile)));
}

/**
 * Runs `turns` calculator turns in-process against a 0-latency provider, `perSession` per fresh session (20
 * or fewer: no compaction is ever due).
 */
async function profileTurns(turns: number, perSession: number): Promise<void> {
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-profile-");
  cleanup.defer(() => temp.remove());
  const runtime = openBenchRuntime(temp.path, provider.url);
  cleanup.defer(() => runtime.close());
  const started = performance.now();
  for (let i = 0; i < turns; i++) {
    await runtime.turn(`profile-${Math.floor(i / perSession)}`, turnMessage(i % perSession));
    runtime.takeRequests();
  }
  console.error(`${turns} turns in ${Math.round(performance.now() - started)} ms`);
}

if (import.meta.main) {
  const { positionals, values } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      top: { type: "string", default: "25" },
      "per-session": { type: "string", default: "100" },
      window: { type: "string" },
      timeline: { type: "string" },
    },
  });
  const [command, ...rest] = positionals;
  if (command === "turns") {
    await profileTurns(Number(rest[0] ?? 3000), Number(values["per-session"]));
  } else if (command === "summarize" && rest.length > 0) {
    const window = values.window?.split(",").map(Number) as [number, number] | undefined;
    for (const path of rest) {
      const profile = JSON.parse(await Deno.readTextFile(path));
      if (values.timeline !== undefined) {
        const bin = Number(values.timeline);
        const line = busyTimeline(profile, bin).map((b, i) => `${i * bin}:${Math.round(b * 100)}%`);
        console.log(`busy share per ${bin} ms: ${line.join(" ")}`);
      }
      printSummary(path, summarizeProfile(profile, { window }), Number(values.top));
    }
  } else {
    console.error(
      "Usage: _bench_profile.ts turns [N] [--per-session N] | " +
        "summarize FILE.cpuprofile... [--top N] [--timeline BIN_MS] [--window FROM_MS,TO_MS]",
    );
    Deno.exit(2);
  }
}
