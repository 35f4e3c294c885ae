/**
 * Crash safety: runs `chat` as a subprocess against a fake provider (tool calls, summaries, answers, random
 * delays) and `kill -9`s it at random and at chosen moments — between turns, during a model call, during
 * tool execution, during compaction. After every kill it checks the database and the trace, then proves a
 * new turn on the same session succeeds.
 *
 * ```sh
 * deno run --no-prompt --allow-read --allow-write --allow-net=127.0.0.1 --allow-env --allow-run \
 *   scripts/crash_test.ts --rounds 50 --seed 1 [--keep]
 * ```
 *
 * The schedule (kill modes, delays, input lines) and the provider's choices are reproducible from the seed;
 * where a kill lands relative to the child's own progress is not, so each round logs the moment it hit.
 * @module
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { readTrace } from "../src/trace/trace.ts";
import { checkCrashInvariants } from "./_crash_invariants.ts";
import { CRASH_SESSION, readSession, type Run } from "./_crash_child.ts";
import { startCrashProvider } from "./_crash_provider.ts";
import { killRound, MODES, newTurn } from "./_crash_round.ts";

export { checkCrashInvariants, CRASH_SESSION };

/** Options of {@linkcode runCrashRounds}. */
export interface CrashRoundsOptions {
  /** Kill rounds to run on the one growing database. @default {50} */
  rounds?: number;
  /** Seed of the schedule and of the provider. @default {1} */
  seed?: number;
  /** Receives one line per round and the violations' details. @default {console.log} */
  log?: (line: string) => void;
  /** Keep the temporary folder with the database and the trace (its path is logged). @default {false} */
  keep?: boolean;
}

/** What the rounds found. */
export interface CrashReport {
  kills: number;
  /** Every invariant broken, prefixed with its round; empty when crash-safe. */
  violations: string[];
  /** The session's final `turn_count`. */
  turns: number;
  /** Successful compactions in the trace; summary replies the provider sent (some to killed processes). */
  compactions: number;
  summaryCalls: number;
  /** Kills by the moment they hit. */
  moments: Record<string, number>;
  /** Kills during compaction, during tool execution, and of those with calls traced but not stored. */
  compactionKills: number;
  toolKills: number;
  toolKillsUnstored: number;
  elapsedMs: number;
}

/**
 * Runs `rounds` kill rounds on one growing database in a temporary folder, each followed by the invariant
 * check and a new turn that must succeed, then a final new turn and check. Resolves to the figures; a
 * violation is reported, never thrown.
 */
export async function runCrashRounds(options: CrashRoundsOptions = {}): Promise<CrashReport> {
  const { rounds = 50, seed = 1, log = (line: string) => console.log(line), keep = false } = options;
  if (!Number.isInteger(rounds) || rounds < 1) {
    throw new RangeError(`rounds must be a whole number >= 1, got ${rounds}`);
  }
  if (!Number.isInteger(seed)) throw new TypeError(`seed must be an integer, got ${seed}`);
  const started = performance.now();
  const dir = Deno.makeTempDirSync({ prefix: "crash-test-" });
  let run: Run | null = null;
  const provider = startCrashProvider({ seed, onMoment: (moment) => run?.listener?.(moment) });
  run = {
    dbPath: join(dir, "db", "sessions.db"),
    tracePath: join(dir, "trace", "traces.jsonl"),
    provider,
    seed,
    spawns: 0,
    line: 0,
    listener: null,
  };
  const violations: string[] = [];
  const moments: Record<string, number> = {};
  try {
    for (let round = 1; round <= rounds; round++) {
      const kill = await killRound(run, round);
      const found = [...kill.problems, ...await checkCrashInvariants(run.dbPath, run.tracePath)];
      const checked = found.length;
      found.push(...await newTurn(run));
      found.push(
        ...(await checkCrashInvariants(run.dbPath, run.tracePath)).map((v) => `after the new turn: ${v}`),
      );
      moments[kill.moment] = (moments[kill.moment] ?? 0) + 1;
      const verdict = found.length === 0 ? "ok" : `${found.length} VIOLATION(S)`;
      const turns = `${kill.turns} turn${kill.turns === 1 ? "" : "s"}`;
      const mode = MODES[(round - 1) % MODES.length];
      log(`round ${round}: killed ${kill.moment} after ${turns} [${mode}] — ${verdict}`);
      found.forEach((v, i) => {
        const line = `round ${round}${i < checked ? " (after the kill)" : ""}: ${v}`;
        violations.push(line);
        log(`  ${line}`);
      });
    }
    const last = [...await newTurn(run), ...await checkCrashInvariants(run.dbPath, run.tracePath)];
    for (const v of last) violations.push(`final new turn: ${v}`);
    log(`final new turn: ${last.length === 0 ? "ok" : last.join("; ")}`);
    const sum = (prefix: string) =>
      Object.entries(moments).filter(([m]) => m.startsWith(prefix)).reduce((n, [, c]) => n + c, 0);
    const traced = readTrace(run.tracePath);
    return {
      kills: rounds,
      violations,
      turns: (await readSession(run.dbPath))?.turns ?? 0,
      compactions: traced.filter((e) => e.event === "compact" && e.data.ok === true).length,
      summaryCalls: provider.stats.summaries,
      moments,
      compactionKills: sum("during compaction"),
      toolKills: sum("during tool execution"),
      toolKillsUnstored: sum("during tool execution (results not stored)"),
      elapsedMs: performance.now() - started,
    };
  } finally {
    await provider.close();
    if (keep) log(`kept ${dir}`);
    else Deno.removeSync(dir, { recursive: true });
  }
}

function wholeNumber(name: string, text: string): number {
  const value = Number(text);
  if (!/^-?\d+$/.test(text) || !Number.isSafeInteger(value)) {
    console.error(`Invalid --${name}=${JSON.stringify(text)}: expected a whole number`);
    Deno.exit(2);
  }
  return value;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      rounds: { type: "string", default: "50" },
      seed: { type: "string", default: "1" },
      keep: { type: "boolean", default: false },
    },
  });
  const rounds = wholeNumber("rounds", values.rounds);
  const seed = wholeNumber("seed", values.seed);
  if (rounds < 1) {
    console.error(`Invalid --rounds=${rounds}: expected 1 or more`);
    Deno.exit(2);
  }
  const report = await runCrashRounds({ rounds, seed, keep: values.keep });
  const byMoment = Object.entries(report.moments).sort(([, a], [, b]) => b - a).map(([m, n]) => `${n} ${m}`);
  console.log(`kills: ${report.kills} (${byMoment.join(", ")})`);
  console.log(`violations: ${report.violations.length}`);
  for (const v of report.violations) console.log(`  ${v}`);
  console.log(`turns stored: ${report.turns}`);
  console.log(
    `compactions seen: ${report.compactions} stored ` +
      `(${report.summaryCalls} summary replies sent, some to a process being killed)`,
  );
  console.log(
    `moments hit: ${report.compactionKills} during compaction, ${report.toolKills} during tool execution ` +
      `(${report.toolKillsUnstored} with the calls traced and their results not stored)`,
  );
  console.log(`elapsed: ${(report.elapsedMs / 1000).toFixed(1)} s (seed ${seed})`);
  Deno.exit(report.violations.length > 0 ? 1 : 0);
}
