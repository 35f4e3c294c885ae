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
import { existsSync } from "node:fs";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { taskPermissionFlags } from "../src/permissions.ts";
import { checkCrashInvariants, clip, isRecord } from "./_crash_invariants.ts";
export { checkCrashInvariants };
import { SessionStore } from "../src/store.ts";
import { readTrace } from "../src/trace.ts";
import {
  type CrashProvider,
  createRng,
  type ProviderMoment,
  startCrashProvider,
  type WireCall,
} from "./_crash_provider.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** The session every round works on. */
export const CRASH_SESSION = "crash-1";
const MODES = [
  "timer", // 0–400 ms after the spawn
  "summary_request", // when the provider receives a summary request, before it answers
  "tool_reply", // 0–2 ms after a tool-call reply was sent (the tool runs then)
  "requests", // 0–20 ms after the N-th provider request (N 1–6)
  "tool_blocked", // while the todo tool waits for the write lock the test holds
  "summary_reply", // 0–2 ms after a summary reply was sent (it is being stored)
  "trace_lines", // once the trace grew by N lines (N 1–15)
  "compaction_blocked", // while the compaction's transaction waits for the write lock
] as const;
type Mode = (typeof MODES)[number];
type Phase = "start" | "model" | "answered" | "summary_pending" | "summary_sent" | "tools";

const LINES: readonly { text: string; expect: string }[] = [
  { text: "what is 12*(3+4)?", expect: "84" },
  { text: "add a todo: buy milk", expect: "buy milk" },
  { text: "My name is Ada.", expect: "Ada" },
  { text: "what is 2**10 and 7*6?", expect: "1024" },
  { text: "compute (1+2)*(3+4)-5", expect: "16" },
  { text: "what is my name?", expect: "name" },
  { text: "what is 100/8?", expect: "12.5" },
];
const TODO_LINE = { text: "add a todo: water the plants", expect: "water the plants" };
const MAX_LINES_PER_RUN = 8;
const FALLBACK_MS = 8000;
const NEW_TURN_TIMEOUT_MS = 30_000;

/** Options of {@linkcode runCrashRounds}. */
export interface CrashRoundsOptions {
  /**
   * Kill rounds to run on the one growing database.
   * @default {50}
   */
  rounds?: number;
  /**
   * Seed of the schedule and of the provider.
   * @default {1}
   */
  seed?: number;
  /**
   * Receives one line per round and the violations' details.
   * @default {console.log}
   */
  log?: (line: string) => void;
  /**
   * Keep the temporary folder with the database and the trace (its path is logged).
   * @default {false}
   */
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
  /** Todo rows whose tool result was never stored (a kill between the tool's commit and the step's). */
  orphanTodos: number;
  elapsedMs: number;
}

interface Run {
  dbPath: string;
  tracePath: string;
  provider: CrashProvider;
  seed: number;
  spawns: number;
  line: number;
  listener: ((moment: ProviderMoment) => void | Promise<void>) | null;
}

interface Chat {
  child: Deno.ChildProcess;
  write(text: string): void;
  finish(): Promise<{ code: number; stdout: string; stderr: string }>;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function spawnChat(run: Run, stream: boolean): Chat {
  run.spawns++;
  const env: Record<string, string> = {
    OPENAI_BASE_URL: run.provider.url,
    AGENT_DB_PATH: run.dbPath,
    AGENT_TRACE_PATH: run.tracePath,
    AGENT_MAX_RAW_TURNS: "2",
    AGENT_STREAM: stream ? "1" : "0",
    LLM_RETRIES: "0",
    NO_COLOR: "1",
  };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value) env[name] = value;
  }
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      ...taskPermissionFlags(env),
      "src/main.ts",
      "chat",
      "--session",
      CRASH_SESSION,
    ],
    cwd: ROOT,
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = new Response(child.stdout).text();
  const stderr = new Response(child.stderr).text();
  const writer = child.stdin.getWriter();
  let writing = Promise.resolve();
  const encoder = new TextEncoder();
  return {
    child,
    write: (text) => {
      // A killed child's stdin is a broken pipe: the line is simply lost, as it would be.
      writing = writing.then(() => writer.write(encoder.encode(`${text}\n`))).catch(() => {});
    },
    finish: async () => {
      await writing;
      await writer.close().catch(() => {});
      const { code } = await child.status;
      return { code, stdout: await stdout, stderr: await stderr };
    },
  };
}

function readFrom(path: string, offset: number): string {
  let file: Deno.FsFile;
  try {
    file = Deno.openSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return "";
    throw error;
  }
  try {
    const size = file.statSync().size;
    const bytes = new Uint8Array(Math.max(0, size - offset));
    file.seekSync(offset, Deno.SeekMode.Start);
    let filled = 0;
    while (filled < bytes.length) {
      const n = file.readSync(bytes.subarray(filled));
      if (n === null || n === 0) break;
      filled += n;
    }
    return new TextDecoder().decode(bytes.subarray(0, filled));
  } finally {
    file.close();
  }
}

function fileSize(path: string): number {
  try {
    return Deno.statSync(path).size;
  } catch {
    return 0;
  }
}

/** The whole event lines of a trace excerpt (a torn last line is not one). */
function wholeEvents(text: string): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  for (const line of text.split("\n").slice(0, -1)) {
    try {
      const event = JSON.parse(line);
      if (isRecord(event)) events.push(event);
    } catch {
      // Reported by the invariant check.
    }
  }
  return events;
}

/**
 * The session's turn count, compacted turns and stored tool messages; null before it exists, or when the
 * database cannot be read (the invariant check reports why).
 */
function readSession(
  dbPath: string,
): { turns: number; compacted: number; toolIds: Set<string>; tools: string[] } | null {
  if (!existsSync(dbPath)) return null;
  let store: SessionStore | null = null;
  try {
    store = new SessionStore(dbPath);
    const session = store.get(CRASH_SESSION);
    if (session === null) return null;
    const tools = store.messages(CRASH_SESSION).filter((m) => m.role === "tool");
    return {
      turns: session.turnCount,
      compacted: session.compactedTurns,
      toolIds: new Set(tools.map((m) => m.toolCallId ?? "")),
      tools: tools.map((m) => m.content ?? ""),
    };
  } catch {
    return null;
  } finally {
    store?.close();
  }
}

/** Holds the database's write lock (`BEGIN IMMEDIATE`) until released: a writer in the child waits. */
function holdWriteLock(dbPath: string): { release(): void } {
  const db = new DatabaseSync(dbPath);
  db.exec("PRAGMA busy_timeout = 2000");
  db.exec("BEGIN IMMEDIATE");
  return {
    release() {
      try {
        db.exec("ROLLBACK");
      } finally {
        db.close();
      }
    },
  };
}

interface KillOutcome {
  moment: string;
  turns: number;
  problems: string[];
}

function nextLine(run: Run): { text: string; expect: string } {
  return LINES[run.line++ % LINES.length];
}

/** What the killed process left: its trace events, and what the database holds of its last moments. */
interface Evidence {
  /** The calls of the last tool-call reply it was sent. */
  calls: readonly WireCall[];
  events: readonly Record<string, unknown>[];
  /** Call ids of the stored tool messages. */
  stored: ReadonlySet<string>;
  /** User turns compacted by this process that no traced `compact` event accounts for. */
  untracedCompacted: number;
}

/** The moment a kill hit, from where the exchange with the provider was and what the child left. */
function describe(phase: Phase, evidence: Evidence): string {
  const { calls, events, stored, untracedCompacted } = evidence;
  if (phase === "start") return "before its first model call";
  if (phase === "model") return "during a model call";
  if (phase === "answered") return "between turns";
  if (phase === "summary_pending") return "during compaction (summary call pending)";
  if (phase === "summary_sent") {
    if (events.at(-1)?.event === "compact") return "between steps (compaction stored)";
    return untracedCompacted > 0
      ? "during compaction (stored, not yet traced)"
      : "during compaction (summary sent, not stored)";
  }
  const ids = new Set(calls.map((c) => c.id));
  const traced = events.some((e) =>
    e.event === "tool_call" && isRecord(e.data) && ids.has(String(e.data.id))
  );
  if (calls.every((c) => stored.has(c.id))) return "between steps (tool results stored)";
  if (traced) return "during tool execution (results not stored)";
  return "during tool execution (reply not yet read)";
}

/** One chat process, fed lines as its turns end, killed at the moment the round's mode picks. */
async function killRound(run: Run, round: number): Promise<KillOutcome> {
  const rng = createRng(run.seed * 7919 + round);
  const int = (lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));
  const mode: Mode = MODES[(round - 1) % MODES.length];
  const params = {
    timer: int(0, 400),
    nth: int(1, 6),
    lines: int(1, 15),
    gap: int(0, 2),
    late: int(0, 20),
  };
  const before = readSession(run.dbPath) ?? { turns: 0, compacted: 0 };
  const traceStart = fileSize(run.tracePath);
  const chat = spawnChat(run, run.spawns % 2 === 0);
  const exited = chat.child.status;
  let phase: Phase = "start";
  let calls: WireCall[] = [];
  let killedIn: Phase | null = null;
  let fallback = false;
  let requests = 0;
  let fed = 0;
  // Assigned in the listener; a holder keeps TypeScript from narrowing it to null after the awaits.
  const held: { lock: { release(): void } | null } = { lock: null };
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const later = (ms: number, work: () => void) => {
    const id = setTimeout(() => {
      timers.delete(id);
      work();
    }, ms);
    timers.add(id);
  };
  const kill = () => {
    if (killedIn !== null) return;
    killedIn = phase;
    try {
      chat.child.kill("SIGKILL");
    } catch {
      // It already exited: reported below.
    }
  };
  const feed = () => {
    if (killedIn !== null || fed >= MAX_LINES_PER_RUN) return;
    fed++;
    chat.write(mode === "tool_blocked" ? TODO_LINE.text : nextLine(run).text);
  };
  const watchTrace = async (found: (events: Record<string, unknown>[]) => boolean, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (killedIn === null && Date.now() < deadline) {
      if (found(wholeEvents(readFrom(run.tracePath, traceStart)))) return;
      await delay(2);
    }
  };

  run.listener = async (moment) => {
    if (killedIn !== null) return;
    if (moment.kind === "request") {
      requests++;
      phase = moment.request === "summary" ? "summary_pending" : "model";
      if (mode === "summary_request" && moment.request === "summary") {
        kill();
        await exited; // the summary reply never goes out while the child lives
      } else if (mode === "requests" && requests === params.nth) later(params.late, kill);
      return;
    }
    if (moment.kind === "reply") {
      const todo = moment.calls.some((c) => c.name === "todo");
      if (held.lock === null && mode === "tool_blocked" && todo) held.lock = holdWriteLock(run.dbPath);
      if (held.lock === null && mode === "compaction_blocked" && moment.reply === "summary") {
        held.lock = holdWriteLock(run.dbPath);
      }
      return;
    }
    phase = moment.reply === "summary"
      ? "summary_sent"
      : moment.reply === "tool_calls"
      ? "tools"
      : "answered";
    calls = moment.calls;
    if (moment.reply === "answer") later(int(0, 30), feed);
    // A timer, not a busy wait: the reply is flushed by this very event loop.
    const now = () => later(params.gap, kill);
    if (mode === "summary_reply" && moment.reply === "summary") now();
    else if (mode === "tool_reply" && moment.reply === "tool_calls") now();
    else if (held.lock !== null && mode === "compaction_blocked") later(40, kill);
    else if (held.lock !== null && mode === "tool_blocked") {
      const id = moment.calls.find((c) => c.name === "todo")?.id;
      const traced = (events: Record<string, unknown>[]) =>
        events.some((e) => e.event === "tool_call" && isRecord(e.data) && e.data.id === id);
      void watchTrace(traced, 3000).then(() => {
        if (killedIn === null) later(20, kill);
      });
    }
  };

  later(int(0, 20), feed);
  later(FALLBACK_MS, () => {
    fallback = killedIn === null;
    kill();
  });
  if (mode === "timer") later(params.timer, kill);
  if (mode === "trace_lines") {
    void watchTrace((events) => events.length >= params.lines, FALLBACK_MS).then(kill);
  }

  await exited;
  const problems: string[] = [];
  const ended = killedIn === null;
  kill(); // stops the watchers; a no-op on a process already killed
  for (const id of timers) clearTimeout(id);
  run.listener = null;
  held.lock?.release();
  const { code, stderr } = await chat.finish();
  await run.provider.idle();
  if (ended) problems.push(`chat exited by itself (code ${code}) before the kill: ${clip(stderr, 300)}`);

  const after = readSession(run.dbPath);
  const events = wholeEvents(readFrom(run.tracePath, traceStart));
  const traced = events.filter((e) => e.event === "compact" && isRecord(e.data) && e.data.ok === true)
    .reduce((n, e) => n + Number((e.data as { turns_removed?: number }).turns_removed ?? 0), 0);
  let moment = describe(killedIn ?? phase, {
    calls,
    events,
    stored: after?.toolIds ?? new Set(),
    untracedCompacted: (after?.compacted ?? 0) - before.compacted - traced,
  });
  if (fallback) moment += " (fallback timer)";
  return { moment, turns: (after?.turns ?? 0) - before.turns, problems };
}

/** A fresh chat process runs one turn to its end: exit 0 and the expected answer on stdout. */
async function newTurn(run: Run): Promise<string[]> {
  const line = nextLine(run);
  const chat = spawnChat(run, run.spawns % 2 === 0);
  chat.write(line.text);
  const timer = setTimeout(() => chat.child.kill("SIGKILL"), NEW_TURN_TIMEOUT_MS);
  const { code, stdout, stderr } = await chat.finish();
  clearTimeout(timer);
  await run.provider.idle();
  const answer = stdout.trim();
  if (code !== 0) return [`new turn ${clip(line.text)} exited ${code}: ${clip(answer)} ${clip(stderr, 300)}`];
  if (!answer.includes(line.expect)) {
    return [`new turn ${clip(line.text)} answered ${clip(answer)}, without ${clip(line.expect)}`];
  }
  return [];
}

function countOrphanTodos(run: Run): number {
  if (!existsSync(run.dbPath)) return 0;
  let db: DatabaseSync | null = null;
  try {
    db = new DatabaseSync(run.dbPath);
    const rows = db.prepare("SELECT text FROM todos WHERE session_id = ?").all(CRASH_SESSION);
    const results = [...run.provider.toolResultsSeen, ...(readSession(run.dbPath)?.tools ?? [])];
    return rows.filter((row) => !results.some((r) => r.includes(JSON.stringify(String(row.text))))).length;
  } catch {
    return 0; // an unreadable database is the invariant check's to report
  } finally {
    db?.close();
  }
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
  let orphans = 0;
  try {
    for (let round = 1; round <= rounds; round++) {
      const kill = await killRound(run, round);
      const found = [...kill.problems, ...checkCrashInvariants(run.dbPath, run.tracePath)];
      const checked = found.length;
      found.push(...await newTurn(run));
      found.push(...checkCrashInvariants(run.dbPath, run.tracePath).map((v) => `after the new turn: ${v}`));
      moments[kill.moment] = (moments[kill.moment] ?? 0) + 1;
      const nowOrphans = countOrphanTodos(run);
      const note = nowOrphans > orphans ? ` (${nowOrphans - orphans} todo without its stored result)` : "";
      orphans = nowOrphans;
      const verdict = found.length === 0 ? "ok" : `${found.length} VIOLATION(S)`;
      const turns = `${kill.turns} turn${kill.turns === 1 ? "" : "s"}`;
      const mode = MODES[(round - 1) % MODES.length];
      log(`round ${round}: killed ${kill.moment} after ${turns} [${mode}]${note} — ${verdict}`);
      found.forEach((v, i) => {
        const line = `round ${round}${i < checked ? " (after the kill)" : ""}: ${v}`;
        violations.push(line);
        log(`  ${line}`);
      });
    }
    const last = [...await newTurn(run), ...checkCrashInvariants(run.dbPath, run.tracePath)];
    for (const v of last) violations.push(`final new turn: ${v}`);
    log(`final new turn: ${last.length === 0 ? "ok" : last.join("; ")}`);
    const sum = (prefix: string) =>
      Object.entries(moments).filter(([m]) => m.startsWith(prefix)).reduce((n, [, c]) => n + c, 0);
    const traced = readTrace(run.tracePath);
    return {
      kills: rounds,
      violations,
      turns: readSession(run.dbPath)?.turns ?? 0,
      compactions: traced.filter((e) => e.event === "compact" && e.data.ok === true).length,
      summaryCalls: provider.stats.summaries,
      moments,
      compactionKills: sum("during compaction"),
      toolKills: sum("during tool execution"),
      toolKillsUnstored: sum("during tool execution (results not stored)"),
      orphanTodos: countOrphanTodos(run),
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
  console.log(`todos whose tool result was never stored: ${report.orphanTodos}`);
  console.log(`elapsed: ${(report.elapsedMs / 1000).toFixed(1)} s (seed ${seed})`);
  Deno.exit(report.violations.length > 0 ? 1 : 0);
}
