/**
 * `deno task crash [--rounds 50] [--seed 1] [--api chat|anthropic|responses] [--keep]`: `kill -9`s `chat` at random and at chosen moments
 * (between turns, in a model call, in tool execution, in compaction), then checks the database and trace and
 * proves a new turn succeeds. The schedule is reproducible from the seed; where a kill lands is not, so each
 * round logs the moment it hit.
 * @module
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import { readTrace } from "../src/trace/trace.ts";
import { checkCrashInvariants } from "./_crash_invariants.ts";
import { CRASH_SESSION, readSession, type Run } from "./_crash_child.ts";
import { startCrashProvider } from "./_fake_provider.ts";
import type { Api } from "./_fake_wires.ts";

const APIS: readonly Api[] = ["chat", "anthropic", "responses"];
import { killRound, MODES, newTurn } from "./_crash_round.ts";

export { checkCrashInvariants, CRASH_SESSION };

/** Options of {@linkcode runCrashRounds}. */
export interface CrashRoundsOptions {
  /** Kill rounds to run on the one growing database. @default {50} */
  rounds?: number;
  /** Seed of the schedule and of the provider. @default {1} */
  seed?: number;
  /** The wire format `chat` speaks to the provider (`LLM_API`). @default {"chat"} */
  api?: Api;
  /** Receives one line per round and the violations' details. @default {console.log} */
  log?: (line: string) => void;
  /** Keep the temporary folder with the database and the trace (its path is logged). @default {false} */
  keep?: boolean;
}

/**
 * What the rounds found: `violations` (each prefixed with its round; empty when crash-safe), the final
 * `turn_count`, compactions traced and summary replies sent, kills by moment and of the chosen kinds.
 */
export interface CrashReport {
  kills: number;
  violations: string[];
  turns: number;
  compactions: number;
  summaryCalls: number;
  moments: Record<string, number>;
  compactionKills: number;
  toolKills: number;
  toolKillsUnstored: number;
  /** Requests the provider received in each wire format. */
  requests: Record<Api, number>;
  elapsedMs: number;
}

/**
 * Runs `rounds` kill rounds on one growing database in a temporary folder, each followed by the invariant
 * check and a new turn that must succeed, then a final new turn and check. Resolves to the figures; a
 * violation is reported, never thrown.
 */
export async function runCrashRounds(options: CrashRoundsOptions = {}): Promise<CrashReport> {
  const { rounds = 50, seed = 1, log = (line: string) => console.log(line), keep = false } = options;
  const { api = "chat" } = options;
  if (!Number.isInteger(rounds) || rounds < 1) {
    throw new RangeError(`rounds must be a whole number >= 1, got ${rounds}`);
  }
  if (!Number.isInteger(seed)) throw new TypeError(`seed must be an integer, got ${seed}`);
  const started = performance.now();
  const dir = Deno.makeTempDirSync({ prefix: "crash-test-" });
  let run: Run | null = null;
  const provider = startCrashProvider({ seed, onMoment: (moment) => run?.listener?.(moment) });
  const [dbPath, tracePath] = [join(dir, "db", "sessions.db"), join(dir, "trace", "traces.jsonl")];
  run = { api, dbPath, tracePath, provider, seed, spawns: 0, line: 0, listener: null };
  const violations: string[] = [];
  const moments: Record<string, number> = {};
  try {
    for (let round = 1; round <= rounds; round++) {
      const kill = await killRound(run, round);
      const found = [...kill.problems, ...await checkCrashInvariants(dbPath, tracePath)];
      const checked = found.length;
      found.push(...await newTurn(run));
      found.push(...(await checkCrashInvariants(dbPath, tracePath)).map((v) => `after the new turn: ${v}`));
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
    const last = [...await newTurn(run), ...await checkCrashInvariants(dbPath, tracePath)];
    for (const v of last) violations.push(`final new turn: ${v}`);
    log(`final new turn: ${last.length === 0 ? "ok" : last.join("; ")}`);
    const sum = (prefix: string) =>
      Object.entries(moments).filter(([m]) => m.startsWith(prefix)).reduce((n, [, c]) => n + c, 0);
    const traced = readTrace(tracePath);
    return {
      kills: rounds,
      violations,
      turns: (await readSession(dbPath))?.turns ?? 0,
      compactions: traced.filter((e) => e.event === "compact" && e.data.ok === true).length,
      summaryCalls: provider.stats.summaries,
      requests: { ...provider.stats.requests },
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
  if (/^-?\d+$/.test(text) && Number.isSafeInteger(value)) return value;
  console.error(`Invalid --${name}=${JSON.stringify(text)}: expected a whole number`);
  Deno.exit(2);
}

const HELP = `deno task crash [--rounds N] [--seed N] [--api chat|anthropic|responses] [--keep]

Kills chat with SIGKILL N times (default 50) at moments drawn from the seed (default 1): between turns, in a
model call, in tool execution, in compaction; after each kill it checks the database and the trace against
the crash invariants and that a new turn is answered. Prints one line per round and a summary; exit 1 if an
invariant was broken, 2 for bad usage. --api sets the wire format chat speaks (LLM_API, default chat) to the
fake provider, which speaks all three. --keep leaves the temporary folder (database, trace) and logs its path.`;

function options() {
  try {
    return parseArgs({
      args: Deno.args,
      options: {
        rounds: { type: "string", default: "50" },
        seed: { type: "string", default: "1" },
        api: { type: "string", default: "chat" },
        keep: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    console.error(`${(error as Error).message}\nRun with --help for usage.`);
    Deno.exit(2);
  }
}

if (import.meta.main) {
  const values = options();
  if (values.help) {
    console.log(HELP);
    Deno.exit(0);
  }
  const [rounds, seed] = [wholeNumber("rounds", values.rounds), wholeNumber("seed", values.seed)];
  if (rounds < 1) {
    console.error(`Invalid --rounds=${rounds}: expected 1 or more`);
    Deno.exit(2);
  }
  const api = values.api as Api;
  if (!APIS.includes(api)) {
    console.error(`Invalid --api=${JSON.stringify(values.api)}: expected ${APIS.join(", ")}`);
    Deno.exit(2);
  }
  const r = await runCrashRounds({ rounds, seed, api, keep: values.keep });
  const byMoment = Object.entries(r.moments).sort(([, a], [, b]) => b - a).map(([m, n]) => `${n} ${m}`);
  console.log([
    `kills: ${r.kills} (${byMoment.join(", ")})`,
    `violations: ${r.violations.length}`,
    ...r.violations.map((v) => `  ${v}`),
    `turns stored: ${r.turns}`,
    `compactions seen: ${r.compactions} stored ` +
    `(${r.summaryCalls} summary replies sent, some to a process being killed)`,
    `moments hit: ${r.compactionKills} during compaction, ${r.toolKills} during tool execution ` +
    `(${r.toolKillsUnstored} with the calls stored and their results not)`,
    `elapsed: ${(r.elapsedMs / 1000).toFixed(1)} s (seed ${seed}, LLM_API=${api})`,
  ].join("\n"));
  Deno.exit(r.violations.length > 0 ? 1 : 0);
}
