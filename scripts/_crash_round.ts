/**
 * One crash round: a `chat` child fed lines as its turns end, `kill -9`ed at the moment the round's mode
 * picks, and what that moment was; then the new turn that must succeed afterwards.
 * @module
 */
import { isRecord } from "../src/_json.ts";
import { clip } from "./_crash_invariants.ts";
import {
  fileSize,
  holdTraceLock,
  holdWriteLock,
  readFrom,
  readSession,
  type Run,
  spawnChat,
  wholeEvents,
} from "./_crash_child.ts";
import { createRng, delay, type WireCall } from "./_fake_provider.ts";

/** The kill modes, one per round in turn. */
export const MODES = [
  "timer", // 0–400 ms after the spawn
  "summary_request", // when the provider receives a summary request, before it answers
  "tool_reply", // 0–2 ms after a tool-call reply was sent (the tool runs then)
  "requests", // 0–20 ms after the N-th provider request (N 1–6)
  "tool_blocked", // once the todo call is stored, before it runs (the test holds the trace's lock)
  "summary_reply", // 0–2 ms after a summary reply was sent (it is being stored)
  "trace_lines", // once the trace grew by N lines (N 1–15)
  "compaction_blocked", // while the compaction's transaction waits for the write lock
] as const;
export type Mode = (typeof MODES)[number];
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

/** What one round's kill left: the moment it hit, the turns stored, problems seen. */
export interface KillOutcome {
  moment: string;
  turns: number;
  problems: string[];
}

function nextLine(run: Run): { text: string; expect: string } {
  return LINES[run.line++ % LINES.length];
}

/**
 * What the killed process left: the calls of the last tool-call reply it was sent, its trace events, the call
 * ids of stored tool messages, and user turns it compacted that no traced `compact` event accounts for.
 */
interface Evidence {
  calls: readonly WireCall[];
  events: readonly Record<string, unknown>[];
  /** Ids of the stored calls (stored before they run). */
  intents: ReadonlySet<string>;
  stored: ReadonlySet<string>;
  untracedCompacted: number;
}

/** The moment a kill hit, from where the exchange with the provider was and what the child left. */
function describe(phase: Phase, evidence: Evidence): string {
  const { calls, events, intents, stored, untracedCompacted } = evidence;
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
  if (calls.every((c) => stored.has(c.id))) return "between steps (tool results stored)";
  if (calls.some((c) => intents.has(c.id))) return "during tool execution (results not stored)";
  return "during tool execution (calls not yet stored)";
}

/** One chat process, fed lines as its turns end, killed at the moment the round's mode picks. */
export async function killRound(run: Run, round: number): Promise<KillOutcome> {
  const rng = createRng(run.seed * 7919 + round);
  const int = (lo: number, hi: number) => lo + Math.floor(rng() * (hi - lo + 1));
  const mode: Mode = MODES[(round - 1) % MODES.length];
  const params = { timer: int(0, 400), nth: int(1, 6), lines: int(1, 15), gap: int(0, 2), late: int(0, 20) };
  const before = await readSession(run.dbPath) ?? { turns: 0, compacted: 0 };
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
  /**
   * tool_blocked: the test holds the trace's lock from before the todo call's reply goes out, so the child stops
   * at its first line after reading it (`llm_call`), before it stores the call; the test sees it wait there in
   * `/proc/locks`. Then, holding the database's write lock, it lets the trace go: the child writes that line and then waits for the database to store the
   * call (a busy wait: nothing else of it runs meanwhile). The test takes the trace's lock back, which the child
   * no longer holds any of, and lets the database go: the child stores the call and stops at its next line
   * (`tool_call`), before the tool runs. It is killed once the call is seen stored. Each step waits for the one
   * before, so how busy the machine is changes nothing.
   */
  const blockOnceStored = async (id: string, first: { release(): void }) => {
    let trace = first;
    let database: { release(): void } | null = null;
    const repliesWithCalls = () =>
      wholeEvents(readFrom(run.tracePath, traceStart)).filter((e) =>
        e.event === "llm_call" && isRecord(e.data) && Number(e.data.tool_call_count) > 0
      ).length;
    const until = async (done: () => boolean | Promise<boolean>) => {
      const deadline = Date.now() + 5000;
      while (killedIn === null && Date.now() < deadline && !(await done())) await delay(2);
    };
    try {
      const seen = repliesWithCalls();
      // Not before: a child still waiting for the reply could meet the database's lock first (a timer's write).
      await until(() => waitsForLock(run.tracePath));
      database = holdWriteLock(run.dbPath);
      trace.release();
      await until(() => repliesWithCalls() > seen);
      trace = await holdTraceLock(run.tracePath);
      database.release();
      database = null;
      await until(async () => (await readSession(run.dbPath))?.callIds.has(id) ?? false);
      kill();
    } finally {
      database?.release();
      trace.release();
    }
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
      const todo = moment.calls.find((c) => c.name === "todo");
      if (held.lock === null && mode === "tool_blocked" && todo !== undefined) {
        // Taken before the reply goes out: the child stops at its first line after reading it.
        const lock = await holdTraceLock(run.tracePath);
        held.lock = { release: () => {} };
        void blockOnceStored(todo.id, lock);
      }
      if (held.lock === null && mode === "compaction_blocked" && moment.reply === "summary") {
        held.lock = holdWriteLock(run.dbPath);
      }
      return;
    }
    phase = ({ summary: "summary_sent", tool_calls: "tools", answer: "answered" } as const)[moment.reply];
    calls = moment.calls;
    if (moment.reply === "answer") later(int(0, 30), feed);
    // A timer, not a busy wait: the reply is flushed by this very event loop.
    const now = () => later(params.gap, kill);
    if (mode === "summary_reply" && moment.reply === "summary") now();
    else if (mode === "tool_reply" && moment.reply === "tool_calls") now();
    else if (held.lock !== null && mode === "compaction_blocked") later(40, kill);
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

  const after = await readSession(run.dbPath);
  const events = wholeEvents(readFrom(run.tracePath, traceStart));
  const traced = events.filter((e) => e.event === "compact" && isRecord(e.data) && e.data.ok === true)
    .reduce((n, e) => n + Number((e.data as { turns_removed?: number }).turns_removed ?? 0), 0);
  let moment = describe(killedIn ?? phase, {
    calls,
    events,
    intents: after?.callIds ?? new Set(),
    stored: after?.toolIds ?? new Set(),
    untracedCompacted: (after?.compacted ?? 0) - before.compacted - traced,
  });
  if (fallback) moment += " (fallback timer)";
  return { moment, turns: (after?.turns ?? 0) - before.turns, problems };
}

/**
 * Whether a process waits for a lock of the file at `path` (Linux: a `->` line of `/proc/locks` for its inode,
 * read with `cat`, since Deno grants `/proc` files only to a process allowed everything).
 */
async function waitsForLock(path: string): Promise<boolean> {
  const inode = Deno.statSync(path).ino;
  const { stdout } = await new Deno.Command("cat", { args: ["/proc/locks"], stderr: "null" }).output();
  return new TextDecoder().decode(stdout).split("\n").some((line) =>
    line.includes("->") && line.includes(`:${inode} `)
  );
}

/** A fresh chat process runs one turn to its end: exit 0 and the expected answer on stdout. */
export async function newTurn(run: Run): Promise<string[]> {
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
