/**
 * The fault matrix: every way a provider can fail, through the real client (`HttpLLM`) over
 * loopback to the fault provider, the real loop, store, tools and JSONL trace. Each case asserts the turn's
 * outcome, its trace events, how many requests (retries) it took, that the session is intact, and that the
 * next turn against a healthy provider is answered. A last test runs the faults with a sentinel key through
 * the loop, the HTTP handler and the chat task, and finds the key nowhere.
 */
import { BackgroundCompactions } from "../src/session/background.ts";
import assert from "node:assert/strict";
import { type Config, loadConfig } from "../src/config.ts";
import { LlmError } from "../src/errors.ts";
import { Authenticator } from "../src/http/auth.ts";
import { createHandler } from "../src/http/handler.ts";
import { SessionRunner } from "../src/session/runner.ts";
import { createLlmFromConfig, HttpLLM } from "../src/llm/client.ts";
import { type Agent, EMPTY_ANSWER, EMPTY_REPLY_NUDGE, runTurn } from "../src/agent/loop.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createLlmSummarizer, deterministicSummarizer } from "../src/memory/summarizer.ts";
import { SharedTrace } from "../src/trace/shared_trace.ts";
import { JsonlTracer, readTrace } from "../src/trace/trace.ts";
import type { EventSink, TracedEvent } from "../src/events.ts";
import type { StoredMessage, TurnResult } from "../src/types.ts";
import { keyOf, realTools, requestTools, runProcess } from "./_harness.ts";
import {
  type Behaviour,
  completion,
  type FaultProvider,
  hang,
  json,
  ok,
  reset,
  type ScriptEnd,
  stall,
  startFaultProvider,
  status,
  stream,
  summaryInvalid,
  text,
  textChunks,
} from "./fixtures/fault_provider.ts";

const KEY = "sk-fault-matrix-key-7c1e";
const SESSION = "fault-1";
const USER = "tester";

// ---------------------------------------------------------------------------------------------------------
// The rig: the real client, loop, store, tools and trace around one fault provider

interface RigOptions {
  /** LLM_RETRIES. @default {2} */
  retries?: number;
  /** LLM_TIMEOUT_SECONDS. @default {5} */
  timeoutSeconds?: number;
  /** The client streams. @default {false} */
  stream?: boolean;
  /** OPENAI_API_KEY. @default {KEY} */
  apiKey?: string;
  /** AGENT_MAX_RAW_TURNS. @default {20} */
  maxRawTurns?: number;
  /** AGENT_COMPACT_BATCH. @default {half of maxRawTurns} */
  compactBatch?: number;
  /**
   * Compaction asks the model (`createLlmSummarizer`) instead of the deterministic summarizer.
   * @default {false}
   */
  llmSummarizer?: boolean;
  /** LLM_MAX_REPLY_BYTES. @default {1048576} */
  maxReplyBytes?: number;
  /** The client's clock for HTTP-date `Retry-After`. @default {Date.now} */
  now?: () => number;
  /**
   * Build the client with `createLlmFromConfig` (its real sleep, base delay 0) instead of the constructor
   * with a sleep that only records its delays.
   * @default {false}
   */
  fromConfig?: boolean;
}

interface Rig {
  provider: FaultProvider;
  llm: HttpLLM;
  store: SqliteStore;
  config: Readonly<Config>;
  agent: Agent;
  emit: EventSink;
  tracePath: string;
  /** The store's trace table the tracer ships to, which the trace route reads. */
  trace: SharedTrace;
  /** The waits the client asked for between attempts, in ms (nothing really waits). */
  delays: number[];
  turn(
    message: string,
    options?: { sessionId?: string; onDelta?: (text: string) => void },
  ): Promise<TurnResult>;
  /** The run's events as read back from the JSONL file. */
  events(runId: string): TracedEvent[];
  [Symbol.asyncDispose](): Promise<void>;
}

function openRig(script: Behaviour[], then: ScriptEnd = "ok", options: RigOptions = {}): Rig {
  const { retries = 2, timeoutSeconds = 5, stream = false, apiKey = KEY, maxRawTurns = 20 } = options;
  const provider = startFaultProvider(script, then);
  const dir = Deno.makeTempDirSync({ prefix: "mra-fault-" });
  const config = loadConfig({
    OPENAI_BASE_URL: provider.url,
    OPENAI_API_KEY: apiKey,
    LLM_TIMEOUT_SECONDS: String(timeoutSeconds),
    LLM_RETRIES: String(retries),
    LLM_RETRY_BASE_DELAY: options.fromConfig ? "0" : "",
    AGENT_MAX_RAW_TURNS: String(maxRawTurns),
    AGENT_COMPACT_BATCH: String(options.compactBatch ?? ""),
    LLM_MAX_REPLY_BYTES: String(options.maxReplyBytes ?? ""),
    AGENT_DB_PATH: `${dir}/sessions.db`,
    AGENT_TRACE_PATH: `${dir}/traces.jsonl`,
  });
  const delays: number[] = [];
  const llm = options.fromConfig ? createLlmFromConfig(config, { stream }) : createLlmFromConfig(config, {
    stream,
    now: options.now,
    sleep: (ms) => {
      delays.push(ms);
      return Promise.resolve();
    },
  });
  const store = new SqliteStore(config.dbPath);
  // No `secrets`: the tracer's defensive redaction is off, so a key leaked by the client itself would show.
  const shared = new SharedTrace(store.trace);
  const tracer = new JsonlTracer(config.tracePath, {
    maxPayloadChars: config.traceMaxPayloadChars,
    onAppend: (event, line) => shared.add(event, line),
  });
  const emit: EventSink = (event) => tracer.write(event);
  const agent: Agent = {
    llm,
    tools: realTools(store),
    maxSteps: config.maxToolIters,
    summarizer: options.llmSummarizer ? createLlmSummarizer(llm) : deterministicSummarizer,
    maxRawTurns: config.maxRawTurns,
    compactBatch: config.compactBatch,
    compactions: new BackgroundCompactions(emit),
    maxCtxTokens: config.maxCtxTokens,
    maxToolCallsPerStep: config.maxToolCallsPerStep,
  };
  return {
    provider,
    llm,
    store,
    config,
    agent,
    emit,
    trace: shared,
    tracePath: config.tracePath,
    delays,
    // Each turn's background compaction, if any, is done before the next turn or assertion.
    turn: async (message, { sessionId = SESSION, onDelta } = {}) => {
      const result = await runTurn({ sessionId, userId: USER, message }, agent, { emit, onDelta, store });
      await agent.compactions.idle();
      return result;
    },
    events: (runId) => readTrace(config.tracePath, (e) => e.run_id === runId),
    [Symbol.asyncDispose]: async () => {
      await agent.compactions.close();
      tracer.close();
      await shared.close();
      await store.close();
      await provider.close();
      Deno.removeSync(dir, { recursive: true });
    },
  };
}

function names(events: TracedEvent[]): string[] {
  return events.map((e) => e.event);
}

function dataOf(events: TracedEvent[], name: string): Record<string, unknown>[] {
  return events.filter((e) => e.event === name).map((e) => e.data);
}

/**
 * The session is whole: every assistant message with tool calls is followed by exactly one tool message
 * per call id (and no tool message stands alone), the given user messages are stored, and `turn_count`
 * is right and equals compacted turns plus stored user messages.
 */
async function assertIntact(
  store: SqliteStore,
  sessionId: string,
  expected: { turns: number; users: string[] },
  userId = USER,
) {
  const messages = await store.messages(keyOf(sessionId, userId));
  const session = await store.get(keyOf(sessionId, userId));
  assert.ok(session !== null, `session ${sessionId} exists`);
  assert.equal(session.turnCount, expected.turns, "turn_count");
  assert.equal(session.turnCount, session.compactedTurns + messages.filter((m) => m.role === "user").length);
  for (const user of expected.users) {
    assert.ok(messages.some((m) => m.role === "user" && m.content === user), `user message "${user}" stored`);
  }
  let paired = 0;
  messages.forEach((m: StoredMessage, i) => {
    if (m.role !== "assistant" || !m.toolCalls?.length) return;
    const results: string[] = [];
    for (let j = i + 1; j < messages.length && messages[j].role === "tool"; j++) {
      results.push(messages[j].toolCallId ?? "");
    }
    assert.deepEqual(results, m.toolCalls.map((call) => call.id), `results of message ${i}`);
    paired += results.length;
  });
  assert.equal(messages.filter((m) => m.role === "tool").length, paired, "no tool message stands alone");
}

/** A healthy provider now: the next turn on the session is answered through the calculator. */
async function assertNextTurnAnswered(rig: Rig, turn: number, sessionId = SESSION): Promise<void> {
  rig.provider.setScript([]);
  const result = await rig.turn("what is 2+3?", { sessionId });
  assert.equal(result.outcome, "answered", result.answer);
  assert.equal(result.answer, "The answer is 5.");
  assert.equal(result.turn, turn);
  await assertIntact(rig.store, sessionId, { turns: turn, users: ["what is 2+3?"] });
}

/** Waits (briefly) until the provider has seen every aborted request go away. */
async function settled(provider: FaultProvider): Promise<void> {
  for (let i = 0; i < 100 && provider.hanging > 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(provider.hanging, 0, "a hanging request was never released");
}

// ---------------------------------------------------------------------------------------------------------
// Timeouts and transient HTTP errors: retried with backoff or Retry-After

Deno.test("fault: a hang past the timeout is retried once, then ends in error (timeout)", async () => {
  await using rig = openRig([hang()], "repeat", { timeoutSeconds: 0.2, retries: 1 });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 2);
  assert.deepEqual(rig.delays, [500]);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), ["run_start", "error", "run_end"]);
  assert.deepEqual(dataOf(events, "error"), [{
    kind: "timeout",
    status: null,
    retries: 1,
    message: "LLM request timed out after 0.2 s (2 attempts)",
  }]);
  assert.match(result.answer, /timed out after 0\.2 s/);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  assert.deepEqual((await rig.store.messages(keyOf(SESSION, USER))).map((m) => m.role), ["user"]);
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: a body stalled after its headers times out and the client hangs up", async () => {
  await using rig = openRig([stall()], "repeat", { timeoutSeconds: 0.2, retries: 1 });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 2);
  const [error] = dataOf(rig.events(result.runId), "error");
  assert.deepEqual([error.kind, error.retries], ["timeout", 1]);
  // Released by the client dropping each connection at its deadline, not by close().
  await settled(rig.provider);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: a 429 with Retry-After: 2 waits 2000 ms once and the turn is answered", async () => {
  const limited = status(429, { error: { message: "Rate limit reached" } }, { "Retry-After": "2" });
  await using rig = openRig([limited]);
  const result = await rig.turn("what is 6*7?");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "The answer is 42.");
  assert.deepEqual(rig.delays, [2000]);
  assert.deepEqual(rig.provider.requests.map((r) => r.behaviour), ["status", "ok", "ok"]);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), [
    "run_start",
    "llm_call",
    "tool_call",
    "tool_result",
    "llm_call",
    "answer",
    "run_end",
  ]);
  assert.deepEqual(dataOf(events, "llm_call").map((d) => d.retries), [1, 0]);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["what is 6*7?"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: 500, 502, 503 back off 500, 1000, 2000 ms, then the 4th attempt answers", async () => {
  await using rig = openRig([status(500), status(502), status(503)], "ok", { retries: 3 });
  const result = await rig.turn("hello there");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "echo: hello there");
  assert.deepEqual(rig.delays, [500, 1000, 2000]);
  assert.equal(rig.provider.requests.length, 4);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), ["run_start", "llm_call", "answer", "run_end"]);
  assert.equal(dataOf(events, "llm_call")[0].retries, 3);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello there"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: 500 on every attempt exhausts the retries: an error naming HTTP 500", async () => {
  await using rig = openRig([status(500)], "repeat", { retries: 2 });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 3);
  assert.deepEqual(rig.delays, [500, 1000]);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), ["run_start", "error", "run_end"]);
  const [error] = dataOf(events, "error");
  assert.equal(error.kind, "http");
  assert.equal(error.status, 500);
  assert.equal(error.retries, 2);
  assert.match(
    String(error.message),
    /^LLM request failed: HTTP 500 from 127\.0\.0\.1:\d+: .* \(3 attempts\)$/,
  );
  assert.ok(result.answer.includes(String(error.message)));
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: a connection reset mid-body is retried and the next attempt answers", async () => {
  await using rig = openRig([reset()]);
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "echo: hello");
  assert.deepEqual(rig.provider.requests.map((r) => r.behaviour), ["reset", "ok"]);
  assert.deepEqual(rig.delays, [500]);
  assert.equal(dataOf(rig.events(result.runId), "llm_call")[0].retries, 1);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: a connection reset on every attempt ends in error (network)", async () => {
  await using rig = openRig([reset()], "repeat", { retries: 1 });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 2);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), ["run_start", "error", "run_end"]);
  const [error] = dataOf(events, "error");
  assert.equal(error.kind, "network");
  assert.equal(error.retries, 1);
  assert.match(String(error.message), /127\.0\.0\.1:\d+ .*\(2 attempts\)$/);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

// ---------------------------------------------------------------------------------------------------------
// Unusable bodies: never retried

Deno.test("fault: a non-JSON 200 body is an invalid_response error, not retried", async () => {
  await using rig = openRig([text("<html><body><h1>502 Bad Gateway</h1></body></html>")], "ok", {
    fromConfig: true,
  });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 1);
  const [error] = dataOf(rig.events(result.runId), "error");
  assert.equal(error.kind, "invalid_response");
  assert.equal(error.retries, 0);
  assert.match(
    String(error.message),
    /^Invalid LLM response from 127\.0\.0\.1:\d+: body is not JSON: <html>/,
  );
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: JSON without choices is an invalid_response error quoting the provider", async () => {
  await using rig = openRig(
    [json({ id: "x", object: "chat.completion" }), json({ error: { message: "upstream overloaded" } })],
    "ok",
    { fromConfig: true },
  );
  const first = await rig.turn("hello");
  const second = await rig.turn("hello again");
  assert.deepEqual([first.outcome, second.outcome], ["error", "error"]);
  assert.equal(rig.provider.requests.length, 2);
  const errors = [first, second].map((r) => dataOf(rig.events(r.runId), "error")[0]);
  assert.deepEqual(errors.map((e) => [e.kind, e.retries]), [["invalid_response", 0], [
    "invalid_response",
    0,
  ]]);
  assert.match(String(errors[0].message), /"choices" is missing or empty$/);
  assert.match(
    String(errors[1].message),
    /"choices" is missing or empty \(provider said: upstream overloaded\)$/,
  );
  await assertIntact(rig.store, SESSION, { turns: 2, users: ["hello", "hello again"] });
  await assertNextTurnAnswered(rig, 3);
});

// ---------------------------------------------------------------------------------------------------------
// Odd replies the loop must survive: bad tool calls, many tool calls, empty and huge replies

function toolCallReply(calls: { id: string; name: string; arguments: string }[]): Behaviour {
  return json(completion({
    content: null,
    tool_calls: calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    })),
  }, "tool_calls"));
}

Deno.test("fault: tool arguments that are not JSON become a tool error, then an answer", async () => {
  await using rig = openRig([
    toolCallReply([{ id: "call_bad", name: "calculator", arguments: '{"expression": 2+2' }]),
  ]);
  const result = await rig.turn("what is 2+2?");
  assert.equal(result.outcome, "answered");
  assert.match(result.answer, /^The tool failed: Cannot run tool "calculator": arguments are not valid JSON/);
  assert.equal(rig.provider.requests.length, 2);
  const sent = rig.provider.requests[1].body!.messages as Record<string, unknown>[];
  assert.equal(sent.at(-1)!.role, "tool");
  assert.equal(sent.at(-1)!.tool_call_id, "call_bad");
  const tool = (await rig.store.messages(keyOf(SESSION, USER))).find((m) => m.role === "tool")!;
  const stored = JSON.parse(tool.content!);
  assert.equal(stored.ok, false);
  assert.match(stored.error, /arguments are not valid JSON/);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), [
    "run_start",
    "llm_call",
    "tool_call",
    "tool_result",
    "llm_call",
    "answer",
    "run_end",
  ]);
  assert.equal(dataOf(events, "tool_result")[0].ok, false);
  assert.deepEqual(result.toolCalls, [{ name: "calculator", arguments: '{"expression": 2+2', ok: false }]);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["what is 2+2?"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: an unknown tool becomes a tool error listing the tools, then an answer", async () => {
  await using rig = openRig([
    toolCallReply([{ id: "call_w", name: "get_weather", arguments: '{"city":"Oslo"}' }]),
  ]);
  const result = await rig.turn("weather in Oslo?");
  assert.equal(result.outcome, "answered");
  const expected = 'Unknown tool "get_weather"; available tools: calculator, search_mock, todo';
  assert.equal(result.answer, `The tool failed: ${expected}`);
  assert.equal(rig.provider.requests.length, 2);
  const [toolResult] = dataOf(rig.events(result.runId), "tool_result");
  assert.equal(toolResult.error, expected);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["weather in Oslo?"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: 50 tool calls are stored before they run, each result as it ends, the first 16 run, then an answer", async () => {
  const calls = Array.from({ length: 50 }, (_, i) => ({
    id: `call_${i}`,
    name: "calculator",
    arguments: JSON.stringify({ expression: `${i}+1` }),
  }));
  await using rig = openRig([toolCallReply(calls)]);
  const appends: string[][] = [];
  const append = rig.store.append.bind(rig.store);
  rig.store.append = (sessionId, messages) => {
    appends.push(messages.map((m) => m.role));
    return append(sessionId, messages);
  };
  const result = await rig.turn("add one to each of 0..49");
  assert.equal(result.outcome, "answered");
  // AGENT_MAX_TOOL_CALLS_PER_STEP (16 by default): the other 34 are answered with a limit error.
  assert.equal(result.answer, "I ran 50 tools; 34 failed.");
  assert.equal(rig.provider.requests.length, 2);
  // The user message, then the calls (before any runs), each result in its own transaction, then the answer.
  assert.deepEqual(appends, [["user"], ["assistant"], ...Array(50).fill(["tool"]), ["assistant"]]);
  const tools = (await rig.store.messages(keyOf(SESSION, USER))).filter((m) => m.role === "tool");
  assert.deepEqual(tools.map((m) => m.toolCallId), calls.map((c) => c.id));
  const results = tools.map((m) => JSON.parse(m.content!));
  assert.deepEqual(results.slice(0, 16).map((r) => r.data.result), calls.slice(0, 16).map((_, i) => i + 1));
  assert.ok(results.slice(16).every((r) => !r.ok && /at most 16 run per reply/.test(r.error)));
  const events = rig.events(result.runId);
  assert.equal(dataOf(events, "llm_call")[0].tool_call_count, 50);
  assert.equal(dataOf(events, "tool_call").length, 50);
  assert.equal(dataOf(events, "tool_result").filter((d) => d.ok === true).length, 16);
  assert.deepEqual(dataOf(events, "run_end")[0].steps, 2);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["add one to each of 0..49"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: tool calls repeating one id get distinct ids and one result each", async () => {
  const same = (expression: string) => ({
    id: "call_dup",
    name: "calculator",
    arguments: JSON.stringify({ expression }),
  });
  await using rig = openRig([toolCallReply([same("1+1"), same("2+2"), same("3+3")])]);
  const result = await rig.turn("three sums please");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "I ran 3 tools; 0 failed.");
  const messages = await rig.store.messages(keyOf(SESSION, USER));
  const ids = messages.find((m) => m.toolCalls?.length)!.toolCalls!.map((c) => c.id);
  assert.equal(ids[0], "call_dup");
  assert.equal(new Set(ids).size, 3);
  assert.deepEqual(messages.filter((m) => m.role === "tool").map((m) => m.toolCallId), ids);
  // The provider checks the pairing the way OpenAI does: a broken history would have been a 400.
  assert.deepEqual(rig.provider.requests.map((r) => r.behaviour), ["json", "ok"]);
  assert.deepEqual(dataOf(rig.events(result.runId), "tool_result").map((d) => d.id), ids);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["three sums please"] });
  await assertNextTurnAnswered(rig, 2);
});

const NOTHING = json(completion({ content: null, tool_calls: null }));

Deno.test("fault: content and tool_calls both null twice: one nudge, then the turn ends empty", async () => {
  await using rig = openRig([NOTHING, NOTHING]);
  const result = await rig.turn("what is 3*3?");
  assert.equal(result.outcome, "empty");
  assert.equal(result.answer, EMPTY_ANSWER);
  assert.equal(rig.provider.requests.length, 2);
  const sent = rig.provider.requests[1].body!.messages as Record<string, unknown>[];
  assert.deepEqual(sent.at(-1), { role: "user", content: EMPTY_REPLY_NUDGE });
  assert.deepEqual((await rig.store.messages(keyOf(SESSION, USER))).map((m) => [m.role, m.content]), [
    ["user", "what is 3*3?"],
    ["runtime", EMPTY_REPLY_NUDGE],
    ["assistant", EMPTY_ANSWER],
  ]);
  const events = rig.events(result.runId);
  assert.deepEqual(names(events), ["run_start", "llm_call", "llm_call", "answer", "run_end"]);
  assert.equal(dataOf(events, "answer")[0].closing, "empty");
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["what is 3*3?"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: content and tool_calls both null once: after the nudge, answered", async () => {
  await using rig = openRig([NOTHING]);
  const result = await rig.turn("what is 3*3?");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "The answer is 9.");
  assert.equal(rig.provider.requests.length, 3);
  assert.deepEqual((await rig.store.messages(keyOf(SESSION, USER))).map((m) => m.role), [
    "user",
    "runtime",
    "assistant",
    "tool",
    "assistant",
  ]);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["what is 3*3?"] });
  await assertNextTurnAnswered(rig, 2);
});

Deno.test("fault: a 1 MB answer within LLM_MAX_REPLY_BYTES is stored and returned whole; the trace cuts it", async () => {
  const lines: string[] = [];
  for (let size = 0, i = 0; size < 1024 * 1024; i++) {
    const line = `line ${i}: lorem ipsum dolor — ✓ "quoted" \\ backslash\n`;
    lines.push(line);
    size += line.length;
  }
  const big = lines.join("") + "THE END";
  // Its JSON body is over 1 MiB (escapes, multi-byte characters): the limit is raised for it.
  await using rig = openRig([json(completion({ content: big }))], "ok", { maxReplyBytes: 4 * 1024 * 1024 });
  const result = await rig.turn("tell me a very long story");
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, big);
  assert.equal((await rig.store.messages(keyOf(SESSION, USER))).at(-1)!.content, big);
  const max = rig.config.traceMaxPayloadChars;
  assert.equal(max, 2000);
  const [answer] = dataOf(rig.events(result.runId), "answer");
  assert.equal(answer.text, `${big.slice(0, max)}…[${big.length - max} more chars]`);
  assert.ok(Deno.statSync(rig.tracePath).size < 20_000, "the trace holds no megabyte");
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["tell me a very long story"] });
  // The next request would be ~260k estimated tokens: compaction (token trigger) folds the story away first.
  await assertNextTurnAnswered(rig, 2);
  const compact = readTrace(rig.tracePath, (e) => e.event === "compact");
  assert.deepEqual(compact.map((e) => [e.data.ok, e.data.trigger]), [[true, "tokens"]]);
});

// ---------------------------------------------------------------------------------------------------------
// Streaming: retried only before the first byte

Deno.test("fault: a stream cut after deltas is an error, not retried, nothing stored", async () => {
  await using rig = openRig(
    [
      stream(textChunks("Hello there, this reply will be cut"), { cutAfter: 3 }),
      stream(textChunks("A second reply that ends without DONE"), { cutAfter: 4, ending: "close" }),
    ],
    "ok",
    { stream: true },
  );
  const deltas: string[] = [];
  const cut = await rig.turn("hello", { onDelta: (t) => deltas.push(t) });
  assert.equal(cut.outcome, "error");
  assert.equal(deltas.join(""), "Hello there, ");
  assert.equal(rig.provider.requests.length, 1);
  assert.equal(rig.provider.requests[0].body!.stream, true);
  const [broken] = dataOf(rig.events(cut.runId), "error");
  assert.equal(broken.kind, "network");
  assert.equal(broken.retries, 0);
  assert.match(String(broken.message), /^LLM stream from 127\.0\.0\.1:\d+ broke after \d+ bytes/);
  assert.deepEqual(names(rig.events(cut.runId)), ["run_start", "error", "run_end"]);

  // A stream that just stops (no [DONE], no finish_reason) is as final.
  const stopped = await rig.turn("hello again", { onDelta: (t) => deltas.push(t) });
  assert.equal(stopped.outcome, "error");
  assert.equal(rig.provider.requests.length, 2);
  const [ended] = dataOf(rig.events(stopped.runId), "error");
  assert.deepEqual([ended.kind, ended.retries], ["invalid_response", 0]);
  assert.match(String(ended.message), /the stream ended after \d+ bytes without \[DONE\] or a finish_reason/);
  assert.deepEqual((await rig.store.messages(keyOf(SESSION, USER))).map((m) => m.role), ["user", "user"]);
  await assertIntact(rig.store, SESSION, { turns: 2, users: ["hello", "hello again"] });
  await assertNextTurnAnswered(rig, 3);
});

Deno.test("fault: a stream that breaks before its first byte is retried, then answered", async () => {
  await using rig = openRig([stream([], { cutAfter: 0 })], "ok", { stream: true });
  const deltas: string[] = [];
  const result = await rig.turn("hello", { onDelta: (t) => deltas.push(t) });
  assert.equal(result.outcome, "answered");
  assert.equal(result.answer, "echo: hello");
  assert.equal(deltas.join(""), "echo: hello");
  assert.equal(rig.provider.requests.length, 2);
  assert.equal(dataOf(rig.events(result.runId), "llm_call")[0].retries, 1);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

// ---------------------------------------------------------------------------------------------------------
// Compaction with a broken summary

Deno.test("fault: a non-JSON summary abandons compaction; answered, messages kept", async () => {
  await using rig = openRig([], "ok", { maxRawTurns: 1, compactBatch: 0, llmSummarizer: true });
  const first = await rig.turn("my name is Ada");
  assert.equal(first.outcome, "answered");
  rig.provider.setScript([ok(), summaryInvalid()]);
  const second = await rig.turn("hello again");
  assert.equal(second.outcome, "answered");
  assert.equal(second.answer, "echo: hello again");
  // The summary is asked for after the answer, in the background.
  assert.deepEqual(rig.provider.requests.map((r) => r.summary), [false, false, true]);
  const events = rig.events(second.runId);
  assert.deepEqual(names(events), ["run_start", "llm_call", "answer", "run_end", "compact"]);
  const [compact] = dataOf(events, "compact");
  assert.equal(compact.ok, false);
  assert.equal(compact.trigger, "turns");
  assert.match(String(compact.reason), /^summary is not valid JSON: /);
  assert.equal((await rig.store.get(keyOf(SESSION, USER)))!.summary, null);
  assert.deepEqual((await rig.store.messages(keyOf(SESSION, USER))).map((m) => m.content), [
    "my name is Ada",
    "echo: my name is Ada",
    "hello again",
    "echo: hello again",
  ]);
  await assertIntact(rig.store, SESSION, { turns: 2, users: ["my name is Ada", "hello again"] });
  // A healthy summary on the next turn: the compaction that failed now succeeds.
  await assertNextTurnAnswered(rig, 3);
  const retried = readTrace(rig.tracePath, (e) => e.event === "compact" && e.turn === 3);
  assert.equal(retried[0].data.ok, true);
  assert.match((await rig.store.get(keyOf(SESSION, USER)))!.summary!, /User said: my name is Ada/);
});

// ---------------------------------------------------------------------------------------------------------
// Authentication: never retried, and the key is never shown

Deno.test("fault: a 401 is not retried; the error quotes the provider with the key redacted", async () => {
  await using rig = openRig([status(401)], "ok", { fromConfig: true });
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "error");
  assert.equal(rig.provider.requests.length, 1);
  assert.equal(rig.provider.requests[0].headers.authorization, `Bearer ${KEY}`);
  const [error] = dataOf(rig.events(result.runId), "error");
  assert.deepEqual([error.kind, error.status, error.retries], ["http", 401, 0]);
  assert.match(
    String(error.message),
    /^LLM request failed: HTTP 401 from 127\.0\.0\.1:\d+: Incorrect API key provided: \[redacted\]$/,
  );
  assert.ok(result.answer.includes("Incorrect API key provided: [redacted]"));
  assert.ok(!result.answer.includes(KEY));
  assert.ok(!Deno.readTextFileSync(rig.tracePath).includes(KEY));
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

// ---------------------------------------------------------------------------------------------------------
// Bonus: Retry-After as an HTTP date and over the cap, 408, and the HTTP handler's 502/504

Deno.test("fault: Retry-After as an HTTP date is read against the clock; capped at 60 s", async () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  await using rig = openRig(
    [
      status(429, undefined, { "Retry-After": new Date(now + 3000).toUTCString() }),
      ok(),
      status(503, undefined, { "Retry-After": "120" }),
    ],
    "ok",
    { now: () => now },
  );
  const first = await rig.turn("hello");
  const second = await rig.turn("hello again");
  assert.deepEqual([first.outcome, second.outcome], ["answered", "answered"]);
  assert.deepEqual(rig.delays, [3000, 60_000]);
  assert.equal(rig.provider.requests.length, 4);
  assert.equal(dataOf(rig.events(second.runId), "llm_call")[0].retries, 1);
  await assertIntact(rig.store, SESSION, { turns: 2, users: ["hello", "hello again"] });
  await assertNextTurnAnswered(rig, 3);
});

Deno.test("fault: a 408 is retried with backoff and the next attempt answers", async () => {
  await using rig = openRig([status(408)]);
  const result = await rig.turn("hello");
  assert.equal(result.outcome, "answered");
  assert.deepEqual(rig.delays, [500]);
  assert.equal(rig.provider.requests.length, 2);
  assert.equal(dataOf(rig.events(result.runId), "llm_call")[0].retries, 1);
  await assertIntact(rig.store, SESSION, { turns: 1, users: ["hello"] });
  await assertNextTurnAnswered(rig, 2);
});

/** The HTTP handler around a rig's real client, store and trace file (the rig's `emit`). */
function handlerFor(rig: Rig, logs: string[]): (request: Request) => Promise<Response> {
  const { emit, agent, store } = rig;
  return createHandler({
    agent,
    store,
    requestTools,
    emit,
    authenticator: new Authenticator([]),
    hosts: { allowed: ["agent.test"] },
    sessions: new SessionRunner({ queue: { maxWaiting: 8 } }),
    maxBodyBytes: 65536,
    trace: rig.trace,
    model: rig.config.model,
    shutdownSignal: new AbortController().signal,
    isShuttingDown: () => false,
    log: (line) => logs.push(line),
  });
}

function post(sessionId: string, message: string, headers: Record<string, string> = {}): Request {
  return new Request(`http://agent.test/v1/sessions/${sessionId}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ message }),
  });
}

Deno.test("fault: over HTTP a model failure is 502 and a timeout 504, each with run_id", async () => {
  await using rig = openRig([status(500), hang()], "ok", { retries: 0, timeoutSeconds: 0.2 });
  const handler = handlerFor(rig, []);
  const failed = await handler(post("http-1", "hello"));
  assert.equal(failed.status, 502);
  const failedBody = await failed.json();
  assert.equal(failedBody.error.code, "llm_error");
  assert.match(failedBody.error.message, /HTTP 500/);
  const timedOut = await handler(post("http-2", "hello"));
  assert.equal(timedOut.status, 504);
  const timedOutBody = await timedOut.json();
  assert.equal(timedOutBody.error.code, "llm_timeout");
  assert.equal(rig.provider.requests.length, 2);
  // Without tokens every request is user "local".
  for (const [session, body, kind] of [["http-1", failedBody, "http"], ["http-2", timedOutBody, "timeout"]]) {
    const trace = await handler(
      new Request(`http://agent.test/v1/sessions/${session}/trace?run_id=${body.error.run_id}`),
    );
    const { events } = await trace.json();
    assert.deepEqual(names(events), ["run_start", "error", "run_end"]);
    assert.equal(events[1].data.kind, kind);
    await assertIntact(rig.store, session, { turns: 1, users: ["hello"] }, "local");
  }
  rig.provider.setScript([]);
  const healthy = await handler(post("http-1", "what is 2+3?"));
  assert.equal(healthy.status, 200);
  assert.equal((await healthy.json()).answer, "The answer is 5.");
  await assertIntact(rig.store, "http-1", { turns: 2, users: ["hello", "what is 2+3?"] }, "local");
});

// ---------------------------------------------------------------------------------------------------------
// The sentinel key: sent to the provider, found nowhere else

const SENTINEL = "sk-SENTINEL-4f9d2c";

/** Every fault of the matrix, as a script for one turn (the client makes one retry at most). */
const MATRIX: { name: string; script: Behaviour[]; then?: ScriptEnd; message?: string }[] = [
  { name: "hang", script: [hang()], then: "repeat" },
  { name: "stall", script: [stall()], then: "repeat" },
  { name: "429", script: [status(429, undefined, { "Retry-After": "2" })] },
  { name: "5xx", script: [status(500), status(502)], then: "repeat" },
  { name: "reset", script: [reset()], then: "repeat" },
  { name: "non-JSON", script: [text("<html>oops</html>")] },
  { name: "no choices", script: [json({ error: { message: `bad key ${SENTINEL}?` } })] },
  {
    name: "bad arguments",
    script: [toolCallReply([{ id: "c1", name: "calculator", arguments: "{" }])],
    message: "what is 1+1?",
  },
  { name: "unknown tool", script: [toolCallReply([{ id: "c1", name: "nope", arguments: "{}" }])] },
  { name: "empty", script: [NOTHING, NOTHING] },
  {
    name: "50 tool calls",
    script: [
      toolCallReply(Array.from({ length: 50 }, () => ({ id: "same", name: "todo", arguments: "{}" }))),
    ],
  },
  { name: "1 MB", script: [json(completion({ content: "lorem ipsum ".repeat(90_000) }))] },
  { name: "401", script: [status(401)] },
  { name: "403 echo", script: [status(403, `forbidden for key ${SENTINEL}`)] },
  { name: "408", script: [status(408)], then: "repeat" },
  {
    name: "http-date 429",
    script: [status(429, undefined, { "Retry-After": "Thu, 01 Jan 2026 00:00:01 GMT" })],
  },
];

/** A value as text to search: a string as it is, anything else as JSON and as inspected (causes, stacks). */
function searchable(value: unknown): string {
  if (typeof value === "string") return value;
  const inspected = Deno.inspect(value, { depth: 20, strAbbreviateSize: Infinity, iterableLimit: Infinity });
  return `${JSON.stringify(value)}\n${inspected}`;
}

/** Runs `deno task chat` with piped stdin, as tests/chat_cli_test.ts does. */
function chatTask(stdin: string, env: Record<string, string>) {
  return runProcess("deno", ["task", "--quiet", "chat"], { env, stdin, clearEnv: true });
}

Deno.test("fault: the sentinel key reaches the provider and nowhere else", async () => {
  const seen: { where: string; text: string }[] = [];
  const collect = (where: string, value: unknown) => seen.push({ where, text: searchable(value) });

  // 1. Every fault through the loop, and straight through the client (its thrown errors, stacks, causes).
  await using rig = openRig([], "ok", {
    apiKey: SENTINEL,
    retries: 1,
    timeoutSeconds: 0.2,
    maxRawTurns: 1,
    compactBatch: 0,
    llmSummarizer: true,
  });
  for (const [i, fault] of MATRIX.entries()) {
    rig.provider.setScript(fault.script, fault.then);
    const result = await rig.turn(fault.message ?? "hello", { sessionId: `sentinel-${i}` });
    collect(`${fault.name}: turn result`, result);
    rig.provider.setScript(fault.script, fault.then);
    try {
      collect(`${fault.name}: reply`, await rig.llm.chat([{ role: "user", content: "hello" }]));
    } catch (error) {
      assert.ok(error instanceof LlmError, `${fault.name}: ${error}`);
      collect(`${fault.name}: thrown`, error);
      collect(`${fault.name}: stack`, error.stack);
      collect(`${fault.name}: json`, JSON.stringify(error));
    }
  }
  // The summary fault, on a session that compacts.
  rig.provider.setScript([]);
  await rig.turn("my key is not here", { sessionId: "sentinel-summary" });
  rig.provider.setScript([ok(), summaryInvalid()]);
  collect("summary: turn", await rig.turn("again", { sessionId: "sentinel-summary" }));
  collect("summary: store", await rig.store.messages(keyOf("sentinel-summary", USER)));

  // 2. A streaming client: cut mid-stream, and a 401 answered to a streaming request.
  {
    await using streaming = openRig([], "ok", { apiKey: SENTINEL, retries: 0, stream: true });
    for (const script of [[stream(textChunks("cut short here"), { cutAfter: 2 })], [status(401)]]) {
      streaming.provider.setScript(script);
      collect("stream: turn", await streaming.turn("hello"));
    }
    collect("stream: trace", Deno.readTextFileSync(streaming.tracePath));
    assert.ok(streaming.provider.requests.every((r) => r.headers.authorization === `Bearer ${SENTINEL}`));
  }

  // 3. The HTTP handler, JSON and SSE, with every route that reads the session back.
  const logs: string[] = [];
  const handler = handlerFor(rig, logs);
  for (
    const script of [[status(401)], [status(500), status(500)], [hang(), hang()], [text("nope")], [reset()]]
  ) {
    for (const accept of ["application/json", "text/event-stream"]) {
      rig.provider.setScript(script, "repeat");
      const response = await handler(post("sentinel-http", "hello", { accept }));
      collect(`http ${script[0].kind} ${accept}: status`, response.status);
      collect(`http ${script[0].kind} ${accept}: headers`, [...response.headers]);
      collect(`http ${script[0].kind} ${accept}: body`, await response.text());
    }
  }
  for (const path of ["", "/trace", "/todos"]) {
    const response = await handler(new Request(`http://agent.test/v1/sessions/sentinel-http${path}`));
    assert.equal(response.status, 200);
    collect(`http GET ${path}`, await response.text());
  }
  collect("http logs", logs.join("\n"));
  collect("trace file", Deno.readTextFileSync(rig.tracePath));

  // 4. The chat task as a subprocess: a 401, then a 500 on both attempts.
  const dir = Deno.makeTempDirSync({ prefix: "mra-sentinel-" });
  try {
    rig.provider.setScript([status(401), status(500), status(500)]);
    const before = rig.provider.requests.length;
    const env: Record<string, string> = {
      PATH: Deno.env.get("PATH") ?? "",
      HOME: Deno.env.get("HOME") ?? dir,
      OPENAI_BASE_URL: rig.provider.url,
      OPENAI_API_KEY: SENTINEL,
      LLM_RETRIES: "1",
      LLM_RETRY_BASE_DELAY: "0",
      AGENT_DB_PATH: `${dir}/db/sessions.db`,
      AGENT_TRACE_PATH: `${dir}/trace/traces.jsonl`,
      AGENT_HISTORY_PATH: `${dir}/db/chat_history`,
    };
    const denoDir = Deno.env.get("DENO_DIR");
    if (denoDir) env.DENO_DIR = denoDir;
    const chat = await chatTask("hello\nhello again\n", env);
    assert.equal(chat.code, 1, chat.stderr);
    assert.equal(rig.provider.requests.length - before, 3);
    assert.equal(chat.stdout, "\n\n", "an empty answer line per failed question");
    const errors = chat.stderr.trim().split("\n");
    assert.equal(errors.length, 2, chat.stderr);
    // That the key is not in them is checked below, with everything else collected.
    assert.match(errors[0], /HTTP 401 .*Incorrect API key provided: /);
    assert.match(errors[1], /HTTP 500 .*\(2 attempts\)/);
    collect("chat stdout", chat.stdout);
    collect("chat stderr", chat.stderr);
    // Every file, the lease marks' folder (db/.lease-owners) included.
    const folders = ["db", "trace"];
    for (const sub of folders) {
      for (const entry of Deno.readDirSync(`${dir}/${sub}`)) {
        if (entry.isDirectory) {
          folders.push(`${sub}/${entry.name}`);
          continue;
        }
        // Read as Latin-1 so the SQLite pages are scanned byte for byte.
        const bytes = Deno.readFileSync(`${dir}/${sub}/${entry.name}`);
        collect(`chat ${sub}/${entry.name}`, new TextDecoder("latin1").decode(bytes));
      }
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }

  // The key did go out on every request, and the provider echoed it back: a leak would have been caught.
  assert.ok(rig.provider.requests.length > 40, `only ${rig.provider.requests.length} requests`);
  assert.ok(rig.provider.requests.every((r) => r.headers.authorization === `Bearer ${SENTINEL}`));
  rig.provider.setScript([status(401)]);
  const echo = await fetch(`${rig.provider.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${SENTINEL}` },
    body: "{}",
  });
  assert.ok((await echo.text()).includes(SENTINEL), "the provider echoes the key it received");
  assert.ok(seen.some((s) => s.text.includes("[redacted]")), "the provider's echo was redacted somewhere");
  const leaks = seen.filter((s) => s.text.includes(SENTINEL)).map((s) => s.where);
  assert.deepEqual(leaks, []);
});
