/** The demo's five phases: each runs real turns, then checks the store, requests and trace. @module */
import { parseSummary, RUNTIME_CONTEXT_HEADER } from "../memory/summary.ts";
import type { Style } from "../cli/render.ts";
import type { LLM } from "../llm/llm.ts";
import { type Agent, type RunOptions, runTurn } from "../agent/loop.ts";
import type { SessionKey, SessionStore } from "../store/store.ts";
import { readTrace } from "../trace/trace.ts";
import type { Message, StoredMessage } from "../types.ts";
import { isBackgroundEvent, type TracedEvent } from "../events.ts";
import { timelineHeader, timelineLine } from "./_timeline.ts";

/** The one user every phase speaks as; phase 2's windows are two sessions of this user. */
const USER = "user-A";
const [CALC_SESSION, MEMORY_SESSION] = ["demo-calculator", "demo-memory"];
const [WINDOW_1, WINDOW_2] = ["A-window-1", "A-window-2"];

/** The key of the demo user's session `sessionId`. */
function own(sessionId: string): SessionKey {
  return { userId: USER, sessionId };
}
/** Raw turns kept in phases 1 and 2: high enough that they never compact, whatever the environment says. */
export const DEMO_RAW_TURNS = 20;
/**
 * Raw turns kept in phase 3, compacted as soon as there are more (AGENT_COMPACT_BATCH=0), so that the
 * fillers push the early fact into the summary.
 */
const MEMORY_LIMITS = { maxRawTurns: 3, compactBatch: 0 };

const CALC_QUESTION = "What is 17 * 23 + 19?";
const WINDOW_1_INPUTS = ["Add a todo: renew the domain name.", "My project is called Falcon."];
const WINDOW_2_INPUTS = ["List my todos. Also, what is my project called?"];
const EARLY_FACT = "My favourite colour is teal.";
const FILLERS = [
  "I'm reading about SQLite write-ahead logging today.",
  "Quick check: what is 12 * (3 + 4)?",
  "Search the docs for compaction summary.",
];
const FOLLOW_UP = "What is my favourite colour?";
/** Phase 4's windows: two of the demo user's (the fact is told in the first, asked in a fresh one), another's. */
const [TOLD_WINDOW, FRESH_WINDOW] = ["A-recall-window-1", "A-recall-window-3"];
const OTHER = { userId: "user-B", sessionId: "B-window-1" };
const TOLD_FACT = "My project is called Heron.";
const TOLD_FILLERS = ["The build passed this morning.", "Lunch was early today.", "The weather is mild."];
const ASK_PROJECT = "What is my project called?";

/** What the phases share: the real dependencies, every event emitted and every request sent, in order. */
export interface Demo {
  agent: Agent;
  run: RunOptions;
  store: SessionStore;
  out: (line: string) => void;
  style: Style;
  tracePath: string;
  events: TracedEvent[];
  requests: Message[][];
}

/** A phase's verdict: `reason` is what was shown on PASS, or every failed check on FAIL. */
export type Verdict = { ok: boolean; reason: string };
/** A tool call paired with the parsed tool message that answered it. */
type AnsweredCall = { name: string; args: Record<string, unknown>; result: ToolResult };
type ToolResult = { ok: boolean; data: Record<string, unknown> | null; error: string | null };

function verdict(problems: string[], success: string): Verdict {
  return problems.length === 0 ? { ok: true, reason: success } : { ok: false, reason: problems.join("; ") };
}

/** Wraps `llm` so that a copy of every request's messages is kept in `requests` before it is sent. */
export function recordRequests(llm: LLM, requests: Message[][]): LLM {
  return {
    chat(messages, options) {
      requests.push(structuredClone(messages));
      return llm.chat(messages, options);
    },
  };
}

/** The session's tool calls with their results, oldest first; calls without a stored result are left out. */
function answeredCalls(messages: readonly StoredMessage[]): AnsweredCall[] {
  const calls: AnsweredCall[] = [];
  for (const m of messages) {
    for (const call of m.toolCalls ?? []) {
      const answer = messages.find((r) => r.role === "tool" && r.toolCallId === call.id);
      if (answer === undefined) continue;
      let args: Record<string, unknown> = {};
      try {
        args = JSON.parse(call.arguments);
      } catch {
        // The registry rejected these arguments; the call still counts, with none.
      }
      calls.push({ name: call.name, args, result: JSON.parse(answer.content ?? "null") });
    }
  }
  return calls;
}

/** Whether `text` shows `value` as a whole number (plain or with thousands separators). */
function mentionsNumber(text: string, value: number): boolean {
  return [String(value), value.toLocaleString("en-US")].some((shown) =>
    new RegExp(`(?<![\\d.])${shown.replace(/[.]/g, "\\.")}(?![\\d])`).test(text)
  );
}

/**
 * Runs one user turn (as the demo user, unless `userId`), printing the user message, (through `emit`) its tool
 * calls, and the answer. Returns its result and the requests the model was sent during it.
 */
async function say(
  demo: Demo,
  sessionId: string,
  message: string,
  limits = { maxRawTurns: DEMO_RAW_TURNS },
  userId = USER,
) {
  const { out, style } = demo;
  out(`  ${style.bold("user  ›")} ${message}`);
  const first = demo.requests.length;
  const input = { sessionId, userId, message };
  const result = await runTurn(input, { ...demo.agent, ...limits }, demo.run);
  const outcome = result.outcome === "answered" ? "" : style.red(` [${result.outcome}]`);
  out(`  ${style.bold("agent ›")} ${result.answer}${outcome}`);
  // A compaction the turn left for the background runs now, before the next turn.
  await demo.agent.compactions.idle();
  return { result, requests: demo.requests.slice(first) };
}

/** Phase 1: an arithmetic question is answered with the calculator's own result. */
async function calculatorPhase(demo: Demo): Promise<Verdict> {
  const { result } = await say(demo, CALC_SESSION, CALC_QUESTION);
  const problems: string[] = [];
  if (result.outcome !== "answered") problems.push(`the turn ended with outcome ${result.outcome}`);
  if (!result.toolCalls.some((c) => c.name === "calculator" && c.ok)) {
    problems.push("the turn made no successful calculator call");
  }
  const computed = answeredCalls(await demo.store.messages(own(CALC_SESSION)))
    .filter((c) => c.name === "calculator" && c.result.ok && typeof c.result.data?.result === "number")
    .map((c) => c.result.data!.result as number);
  const value = computed.at(-1);
  if (value === undefined) problems.push("no calculator result is stored");
  else if (!mentionsNumber(result.answer, value)) {
    problems.push(`the answer does not contain the calculator's result ${value}`);
  }
  return verdict(problems, `the calculator returned ${value} and the answer contains it`);
}

/** Phase 2: two sessions of one user share nothing: todos, facts, history, turn counts. */
async function windowsPhase(demo: Demo): Promise<Verdict> {
  const { store, out, style } = demo;
  out(style.dim(`  window 1 = session ${WINDOW_1}`));
  for (const input of WINDOW_1_INPUTS) await say(demo, WINDOW_1, input);
  out(style.dim(`  window 2 = session ${WINDOW_2}, same user ${USER}`));
  const window2 = [];
  for (const input of WINDOW_2_INPUTS) window2.push(await say(demo, WINDOW_2, input));

  const problems: string[] = [];
  const [todos1, todos2] = [await store.listTodos(own(WINDOW_1)), await store.listTodos(own(WINDOW_2))];
  const texts = (todos: { text: string }[]) => JSON.stringify(todos.map((t) => t.text));
  out(style.dim(`  store: ${WINDOW_1} todos ${texts(todos1)}, ${WINDOW_2} todos ${texts(todos2)}`));
  if (todos1.length !== 1 || !/domain/i.test(todos1[0].text)) {
    problems.push(`window 1 should hold exactly the domain todo, holds ${JSON.stringify(todos1)}`);
  }
  if (todos2.length !== 0) problems.push(`window 2's todo list in the store is not empty`);
  const listed = answeredCalls(await store.messages(own(WINDOW_2)))
    .filter((c) => c.name === "todo" && c.args.action === "list");
  if (listed.length === 0) problems.push("window 2 never called the todo tool with action list");
  for (const call of listed) {
    const shown = call.result.data?.todos;
    if (!call.result.ok || !Array.isArray(shown) || shown.length !== 0) {
      problems.push(`window 2's todo list result is not an empty list: ${JSON.stringify(call.result)}`);
    }
  }
  const answer = window2.at(-1)!.result.answer;
  if (/falcon/i.test(answer)) problems.push("window 2's answer names window 1's project Falcon");

  // Window 1's distinctive texts: none of them may reach a request made for window 2.
  const secrets = [...WINDOW_1_INPUTS, "Falcon", ...todos1.map((t) => t.text)].map((s) => s.toLowerCase());
  for (const request of window2.flatMap((e) => e.requests)) {
    for (const m of request) {
      const text = `${m.content ?? ""} ${(m.toolCalls ?? []).map((c) => c.arguments).join(" ")}`
        .toLowerCase();
      const leaked = secrets.find((s) => text.includes(s));
      if (leaked !== undefined) problems.push(`a window 2 request carried window 1's text "${leaked}"`);
    }
  }

  const [s1, s2] = [await store.get(own(WINDOW_1)), await store.get(own(WINDOW_2))];
  out(style.dim(`  store: turn_count ${WINDOW_1}=${s1?.turnCount}, ${WINDOW_2}=${s2?.turnCount}`));
  if (s1?.turnCount !== WINDOW_1_INPUTS.length || s2?.turnCount !== WINDOW_2_INPUTS.length) {
    const expected = `${WINDOW_1_INPUTS.length} and ${WINDOW_2_INPUTS.length}`;
    problems.push(`turn counts are ${s1?.turnCount} and ${s2?.turnCount}, expected ${expected}`);
  }
  for (const [n, id, inputs] of [[1, WINDOW_1, WINDOW_1_INPUTS], [2, WINDOW_2, WINDOW_2_INPUTS]] as const) {
    const users = (await store.messages(own(id))).filter((m) => m.role === "user").map((m) => m.content);
    if (JSON.stringify(users) !== JSON.stringify(inputs)) {
      problems.push(`window ${n}'s stored history is not exactly its own user messages`);
    }
  }
  const window2Saw = "window 2 saw an empty list, no window 1 text, and its own history and turn count";
  return verdict(problems, `the todo and the project name stayed in window 1; ${window2Saw}`);
}

function printSummary(demo: Demo, text: string | null): void {
  const { out, style } = demo;
  const summary = parseSummary(text);
  if (summary === null) {
    return out(style.dim(`  summary: ${text === null ? "(none)" : "(not a valid summary)"}`));
  }
  out(`  ${style.bold("summary")} (sessions.summary, updated ${summary.updated_at}):`);
  for (const field of ["goals", "facts", "todos", "unresolved"] as const) {
    const items = summary[field];
    out(`    ${`${field}:`.padEnd(12)}${items.length === 0 ? style.dim("(none)") : `- ${items[0]}`}`);
    for (const item of items.slice(1)) out(`    ${"".padEnd(12)}- ${item}`);
  }
}

/** Phase 3: an early fact survives compaction only in the summary, and the follow-up is answered from it. */
async function memoryPhase(demo: Demo): Promise<Verdict> {
  const { store, out, style } = demo;
  const kept = `keeps ${MEMORY_LIMITS.maxRawTurns} raw turns (AGENT_MAX_RAW_TURNS)`;
  out(style.dim(`  session ${MEMORY_SESSION} ${kept}, compacting after each answer past them`));
  for (const input of [EARLY_FACT, ...FILLERS]) await say(demo, MEMORY_SESSION, input, MEMORY_LIMITS);
  const rawBefore = await store.messages(own(MEMORY_SESSION));
  printSummary(demo, (await store.get(own(MEMORY_SESSION)))?.summary ?? null);
  const { result, requests } = await say(demo, MEMORY_SESSION, FOLLOW_UP, MEMORY_LIMITS);

  const problems: string[] = [];
  const teal = (m: { content: string | null }) => /teal/i.test(m.content ?? "");
  const compactions = demo.events.filter((e) => e.session_id === MEMORY_SESSION && e.event === "compact");
  if (!compactions.some((e) => e.data.ok === true)) {
    const reasons = [...new Set(compactions.map((e) => String(e.data.reason)))].join(", ");
    problems.push(`no compaction succeeded${reasons === "" ? "" : ` (${reasons})`}`);
  }
  if (rawBefore.some(teal)) problems.push("before the follow-up, the raw stored messages still mention teal");
  if ((await store.messages(own(MEMORY_SESSION))).some((m) => m.role === "user" && teal(m))) {
    problems.push("the early fact is still a raw stored user message");
  }
  // The first request of the follow-up is what the model had to answer from.
  const asked = requests[0] ?? [];
  const carriers = asked.filter(teal);
  if (carriers.length === 0) problems.push("the follow-up request does not carry the early fact at all");
  if (carriers.some((m) => m.role !== "system" || !m.content!.startsWith(RUNTIME_CONTEXT_HEADER))) {
    problems.push("the follow-up request carries the early fact outside the [RUNTIME CONTEXT] message");
  }
  if (!/\bteal\b/i.test(result.answer)) problems.push("the answer does not mention teal");
  const removed = compactions.filter((e) => e.data.ok === true)
    .reduce((n, e) => n + Number(e.data.turns_removed ?? 0), 0);
  const success = `${removed} turns were compacted; teal reached the model only inside [RUNTIME CONTEXT]`;
  return verdict(problems, `${success} and the answer names it`);
}

/**
 * Phase 4: a fact told in one window and compacted there reaches the same user's fresh window through their
 * memory (recalled into [RUNTIME CONTEXT]), and never another user's window that asks the same words.
 */
async function recallPhase(demo: Demo): Promise<Verdict> {
  const { store, out, style } = demo;
  out(
    style.dim(`  window 1 = session ${TOLD_WINDOW}, compacting past ${MEMORY_LIMITS.maxRawTurns} raw turns`),
  );
  for (const input of [TOLD_FACT, ...TOLD_FILLERS]) await say(demo, TOLD_WINDOW, input, MEMORY_LIMITS);
  out(style.dim(`  window 3 = session ${FRESH_WINDOW}, new, same user ${USER}`));
  const fresh = await say(demo, FRESH_WINDOW, ASK_PROJECT);
  out(style.dim(`  another user's window = ${OTHER.userId}/${OTHER.sessionId}`));
  const other = await say(demo, OTHER.sessionId, ASK_PROJECT, undefined, OTHER.userId);
  const memory = await store.listMemory(USER);
  out(style.dim(`  store: ${USER}'s memory holds ${memory.length} items; ${OTHER.userId}'s none`));

  const problems: string[] = [];
  const heron = (text: string | null | undefined) => /heron/i.test(text ?? "");
  const writes = demo.events.filter((e) =>
    e.session_id === TOLD_WINDOW && e.event === "memory_write" && e.data.source === "compaction"
  );
  if (writes.length === 0) problems.push("no compaction of window 1 wrote the user's memory");
  if ((await store.messages(own(TOLD_WINDOW))).some((m) => m.role === "user" && heron(m.content))) {
    problems.push("the fact is still a raw stored message of window 1: it was not compacted there");
  }
  if (!memory.some((item) => heron(item.text))) problems.push("the user's memory does not hold the fact");
  const asked = fresh.requests[0] ?? [];
  const carriers = asked.filter((m) => heron(m.content));
  if (carriers.length === 0) problems.push("window 3's request does not carry the fact");
  if (carriers.some((m) => m.role !== "system" || !m.content!.startsWith(RUNTIME_CONTEXT_HEADER))) {
    problems.push("window 3's request carries the fact outside the [RUNTIME CONTEXT] message");
  }
  if (!demo.events.some((e) => e.session_id === FRESH_WINDOW && e.event === "memory_recall")) {
    problems.push("the trace has no memory_recall for window 3");
  }
  if (!heron(fresh.result.answer)) problems.push("window 3's answer does not name Heron");
  if (other.requests.flat().some((m) => heron(m.content))) {
    problems.push(`a request of ${OTHER.userId}'s window carried the demo user's fact`);
  }
  if (heron(other.result.answer)) problems.push(`${OTHER.userId}'s answer names Heron`);
  const success = "the fact compacted in window 1 reached fresh window 3 in [RUNTIME CONTEXT] user_memory " +
    `and its answer; ${OTHER.userId}'s window asking the same got nothing of it`;
  return verdict(problems, success);
}

/** Phase 5: the trace file holds every run, well formed, with the events the other phases produced. */
function tracePhase(demo: Demo): Verdict {
  const { out, style } = demo;
  const events = readTrace(demo.tracePath);
  const runs = Map.groupBy(events, (e) => e.run_id);
  out(style.dim(`  ${demo.tracePath}: ${events.length} events in ${runs.size} runs`));
  const start = events.length === 0 ? 0 : Date.parse(events[0].ts);
  out(style.bold(timelineHeader()));
  for (const e of events) out(timelineLine(e, start));

  const problems: string[] = [];
  if (runs.size === 0) problems.push("the trace holds no runs");
  for (const [id, run] of runs) {
    // A background compaction is its run's too, traced after the run ended.
    const last = run.findLast((e) => !isBackgroundEvent(e));
    if (run[0].event !== "run_start" || last?.event !== "run_end") {
      problems.push(`run ${id.slice(0, 8)} does not start with run_start and end with run_end`);
    }
  }
  const unmeasured = events.filter((e) => e.event === "llm_call" && typeof e.data.latency_ms !== "number");
  if (unmeasured.length > 0) problems.push(`${unmeasured.length} llm_call events have no latency_ms`);
  for (const name of ["compact", "tool_call", "tool_result"]) {
    if (!events.some((e) => e.event === name)) problems.push(`the trace has no ${name} event`);
  }
  const shape = "every llm_call has latency_ms; compact, tool_call and tool_result are present";
  return verdict(problems, `${runs.size} runs, each from run_start to run_end; ${shape}`);
}

export const PHASES: readonly { name: string; run: (demo: Demo) => Verdict | Promise<Verdict> }[] = [
  { name: "Calculator loop", run: calculatorPhase },
  { name: "Two windows", run: windowsPhase },
  { name: "Follow-up after compaction", run: memoryPhase },
  { name: "Memory across windows", run: recallPhase },
  { name: "Trace", run: tracePhase },
];
