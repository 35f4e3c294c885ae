/**
 * Golden outputs: for one scripted conversation, the trace lines, the REPL's output (piped and on a terminal)
 * and the HTTP responses are byte-identical to the files in `tests/fixtures/golden/`. A refactoring must keep
 * them so; a deliberate change of output rewrites them with `GOLDEN_UPDATE=1 deno task test` and shows the
 * difference in review. Only what cannot repeat is normalized: measured latencies, and the REPL's spinner
 * frames (drawn on a timer).
 */
import { BackgroundCompactions } from "../src/session/background.ts";
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { LlmError } from "../src/errors.ts";
import { Authenticator } from "../src/http/auth.ts";
import { createHandler } from "../src/http/handler.ts";
import { SessionRunner } from "../src/session/runner.ts";
import type { Agent } from "../src/agent/loop.ts";
import { ScriptedLLM, type ScriptStep } from "../src/llm/scripted.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { deterministicSummarizer } from "../src/memory/summarizer.ts";
import { JsonlTracer } from "../src/trace/trace.ts";
import { SharedTrace } from "../src/trace/shared_trace.ts";
import { counterIds, realTools, requestTools, steppingClock, tempDir, textSink } from "./_harness.ts";

const GOLDEN = new URL("./fixtures/golden/", import.meta.url);
const UPDATE = Deno.env.get("GOLDEN_UPDATE") === "1";

/** Compares `actual` with the golden file `name`, or writes it with GOLDEN_UPDATE=1. */
function assertGolden(name: string, actual: string): void {
  const url = new URL(name, GOLDEN);
  if (UPDATE) {
    Deno.mkdirSync(GOLDEN, { recursive: true });
    Deno.writeTextFileSync(url, actual);
    return;
  }
  const expected = Deno.readTextFileSync(url);
  if (actual === expected) return;
  const a = actual.split("\n");
  const e = expected.split("\n");
  const line = a.findIndex((text, i) => text !== e[i]);
  assert.fail(`${name} differs at line ${line + 1}:\n  golden: ${e[line]}\n  now:    ${a[line]}`);
}

/** What a run cannot repeat: measured durations, and trace cursors. */
function normalize(text: string): string {
  return text
    .replace(/"latency_ms":\d+/g, '"latency_ms":0')
    .replace(/\\"latency_ms\\":\d+/g, '\\"latency_ms\\":0')
    .replace(/"next_cursor":"[^"]+"/g, '"next_cursor":"<cursor>"');
}

const usage = (prompt: number, completion: number) => ({
  promptTokens: prompt,
  completionTokens: completion,
  totalTokens: prompt + completion,
  cachedTokens: null,
});

/** A store, a tracer and turn dependencies on a fixed clock and counted ids, around `script`. */
function world(dir: string, script: ScriptStep[], name: string) {
  const store = new SqliteStore(`${dir}/${name}.db`, { now: steppingClock() });
  const tracePath = `${dir}/${name}.jsonl`;
  // The tracer's events go on to the store's trace table, where the trace route reads them.
  const shared = new SharedTrace(store.trace);
  const tracer = new JsonlTracer(tracePath, {
    maxPayloadChars: 400,
    onAppend: (event, line) => shared.add(event, line),
  });
  const agent: Agent = {
    llm: new ScriptedLLM(script),
    tools: realTools(store),
    maxSteps: 4,
    summarizer: deterministicSummarizer,
    maxRawTurns: 2,
    compactBatch: 0,
    compactions: new BackgroundCompactions((event) => tracer.write(event)),
    maxCtxTokens: 6000,
    now: steppingClock(Date.parse("2026-06-01T00:00:00Z")),
    newId: counterIds(`${name}-run`),
  };
  return {
    store,
    tracer,
    shared,
    agent,
    trace: () => normalize(Deno.readTextFileSync(tracePath)),
    close: async () => {
      await agent.compactions.close();
      tracer.close();
      await shared.close();
      await store.close();
    },
  };
}

/** The script of the REPL conversation: tools in parallel, a todo, a search, a failure, empty replies. */
const CHAT_SCRIPT: ScriptStep[] = [
  {
    toolCalls: [
      { name: "calculator", arguments: { expression: "12*(3+4)" } },
      { name: "calculator", arguments: { expression: "2**10" } },
    ],
    usage: usage(120, 30),
  },
  {
    content: "12*(3+4) is 84 and 2**10 is 1024.",
    deltas: ["12*(3+4) is 84", " and 2**10 is 1024."],
    usage: usage(160, 20),
  },
  { toolCalls: [{ name: "todo", arguments: { action: "add", text: "buy milk" } }], usage: usage(180, 12) },
  { content: "Added **buy milk** to your todos.", usage: usage(200, 10) },
  { toolCalls: [{ name: "search_mock", arguments: { query: "compaction summary" } }], usage: usage(210, 9) },
  { content: "Old turns are folded into a structured summary.", usage: usage(400, 14) },
  new LlmError("LLM request failed: HTTP 503 from provider.test", { kind: "http", status: 503, retries: 2 }),
  { content: "" },
  { content: null },
  { toolCalls: [{ name: "nope", arguments: "{" }], usage: usage(50, 5) },
  { toolCalls: [{ name: "calculator", arguments: { expression: "1/0" } }] },
  { toolCalls: [{ name: "calculator", arguments: { expression: "1+1" } }] },
  { toolCalls: [{ name: "calculator", arguments: { expression: "2+2" } }] },
];

const CHAT_LINES = [
  "what is 12*(3+4), and 2**10?",
  "remember to buy milk",
  "how does compaction work?",
  "this one fails",
  "say nothing",
  "loop until the limit",
];

Deno.test("golden: the piped REPL's output and the trace of a scripted conversation are unchanged", async () => {
  using dir = tempDir();
  const w = world(dir.path, CHAT_SCRIPT, "piped");
  try {
    const input = new PassThrough();
    const output = textSink();
    const status = textSink();
    const chat = runChat({
      sessionId: "cli",
      userId: "local",
      deps: w.agent,
      store: w.store,
      emit: (event) => w.tracer.write(event),
      input,
      output: output.stream,
      status: status.stream,
      interactive: false,
    });
    input.end(CHAT_LINES.join("\n") + "\n");
    assert.equal(await chat, 1, "a piped turn ended in error");
    // With a scripted model no turn waits for a timer, so the one compaction the turns started runs now.
    await w.agent.compactions.idle();
    assertGolden("repl_piped.txt", `--- stdout\n${output.text()}--- stderr\n${status.text()}`);
    assertGolden("trace_piped.jsonl", w.trace());
  } finally {
    await w.close();
  }
});

/** Removes what a run cannot repeat: the spinner's frames (drawn on a timer) and the measured turn times. */
function withoutSpinner(text: string): string {
  return text
    // deno-lint-ignore no-control-regex
    .replace(/\r\x1b\[2K(\x1b\[2m[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] thinking…\x1b\[0m)?/g, "")
    // The time a turn took, at the start of its stats line, is measured.
    // deno-lint-ignore no-control-regex
    .replace(/(\x1b\[2m)(\d+(?:\.\d+)? (?:ms|s)|\d+ min \d+ s)( · )/g, "$1<time>$3");
}

Deno.test("golden: the REPL on a terminal shows the same text, colours and commands", async () => {
  using dir = tempDir();
  const w = world(dir.path, CHAT_SCRIPT, "tty");
  try {
    const input = new PassThrough();
    const output = textSink();
    const status = textSink();
    let ended = 0;
    const chat = runChat({
      sessionId: "tty",
      userId: "local",
      deps: w.agent,
      store: w.store,
      emit: (event) => {
        w.tracer.write(event);
        if (event.event === "run_end") ended++;
      },
      input,
      output: output.stream,
      status: status.stream,
      interactive: true,
    });
    const until = async (turns: number) => {
      for (let i = 0; i < 500 && ended < turns; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(ended, turns);
    };
    const lines = [
      ...CHAT_LINES.slice(0, 4),
      "/retry",
      "/session",
      "/todos",
      "/history 2",
      "/summary",
      "/usage",
      "/sessions",
      "/help",
      "/nope",
    ];
    // Each line is answered by a freshly drawn, empty prompt; waiting for it keeps the output's order fixed.
    const FRESH_PROMPT = "\r\x1b[0J\x1b[1myou> \x1b[0m\r\x1b[5C";
    const untilPrompt = async (after: number) => {
      const ready = () => output.text().length > after && output.text().endsWith(FRESH_PROMPT);
      for (let i = 0; i < 500 && !ready(); i++) await new Promise((r) => setTimeout(r, 5));
      assert.ok(ready(), `no fresh prompt after ${JSON.stringify(output.text().slice(after))}`);
    };
    await untilPrompt(0);
    let turns = 0;
    for (const line of lines) {
      const before = output.text().length;
      input.write(`${line}\r`);
      if (!line.startsWith("/") || line === "/retry") {
        await until(++turns);
        // A compaction the turn started runs before the next line, however late its timer fires under load.
        await w.agent.compactions.idle();
      }
      await untilPrompt(before);
    }
    input.write("/exit\r");
    assert.equal(await chat, 0);
    assertGolden(
      "repl_tty.txt",
      `--- stdout\n${withoutSpinner(output.text())}\n--- stderr\n${withoutSpinner(status.text())}`,
    );
    assertGolden("trace_tty.jsonl", w.trace());
  } finally {
    await w.close();
  }
});

const HTTP_SCRIPT: ScriptStep[] = [
  { toolCalls: [{ name: "calculator", arguments: { expression: "2*21" } }], usage: usage(90, 11) },
  { content: "2*21 is 42.", usage: usage(120, 8) },
  { content: "Streaming, word by word.", deltas: ["Streaming,", " word", " by word."], usage: usage(130, 6) },
  new LlmError("LLM request timed out after 60 s", { kind: "timeout", retries: 2 }),
  { content: "Retried: still here.", usage: usage(150, 5) },
  { toolCalls: [{ name: "todo", arguments: { action: "add", text: "water plants" } }] },
  { content: "Noted." },
];

Deno.test("golden: the HTTP API's responses to a scripted session are unchanged", async () => {
  using dir = tempDir();
  const w = world(dir.path, HTTP_SCRIPT, "http");
  const shutdown = new AbortController();
  const handler = createHandler({
    agent: w.agent,
    store: w.store,
    requestTools,
    emit: (event) => w.tracer.write(event),
    authenticator: new Authenticator([
      { token: "golden-token-alice-0001", userId: "alice" },
      { token: "golden-token-bob-000002", userId: "bob" },
    ]),
    sessions: new SessionRunner({ queue: { maxWaiting: 8 } }),
    maxBodyBytes: 4096,
    trace: w.shared,
    model: "scripted",
    shutdownSignal: shutdown.signal,
    isShuttingDown: () => false,
    log: () => {},
  });
  const alice = { authorization: "Bearer golden-token-alice-0001" };
  const bob = { authorization: "Bearer golden-token-bob-000002" };
  const json = { "content-type": "application/json" };
  const requests: [string, string, Record<string, string>, string?][] = [
    ["POST", "/v1/sessions/web/messages", { ...alice, ...json }, '{"message":"what is 2*21?"}'],
    [
      "POST",
      "/v1/sessions/web/messages",
      { ...alice, ...json, accept: "text/event-stream" },
      '{"message":"stream it"}',
    ],
    ["POST", "/v1/sessions/web/messages", { ...alice, ...json }, '{"message":"this one times out"}'],
    ["POST", "/v1/sessions/web/retry", alice],
    ["POST", "/v1/sessions/web/retry", alice],
    ["POST", "/v1/sessions/web/messages", { ...alice, ...json }, '{"message":"remind me to water plants"}'],
    ["GET", "/v1/sessions", alice],
    ["GET", "/v1/sessions/web", alice],
    ["GET", "/v1/sessions/web/todos", alice],
    ["GET", "/v1/sessions/web/trace?limit=5", alice],
    ["GET", "/v1/sessions/web", bob],
    ["GET", "/v1/sessions", bob],
    ["GET", "/v1/sessions/bad%20id", alice],
    ["POST", "/v1/sessions/web/messages", { ...alice, ...json }, '{"message": 3}'],
    ["POST", "/v1/sessions/web/messages", { ...alice, ...json }, "{not json"],
    ["POST", "/v1/sessions/web/messages", alice, '{"message":"no type"}'],
    ["GET", "/v1/sessions", {}],
    ["GET", "/v1/sessions", { authorization: "Bearer wrong-token-0000000000" }],
    ["PUT", "/v1/sessions/web", alice],
    ["GET", "/nowhere", alice],
    ["HEAD", "/healthz", {}],
    ["GET", "/healthz", {}],
    ["DELETE", "/v1/sessions/web", alice],
    ["GET", "/v1/sessions/web/trace", alice],
    ["DELETE", "/v1/sessions/web", alice],
  ];
  let transcript = "";
  try {
    for (const [method, path, headers, body] of requests) {
      const response = await handler(new Request(`http://agent.test${path}`, { method, headers, body }));
      const shown = ["content-type", "allow", "www-authenticate", "retry-after", "cache-control"]
        .map((name) => [name, response.headers.get(name)])
        .filter(([, value]) => value !== null)
        .map(([name, value]) => `${name}: ${value}`);
      transcript += `>>> ${method} ${path}${body === undefined ? "" : ` ${body}`}\n<<< ${response.status}\n`;
      transcript += shown.map((line) => `${line}\n`).join("");
      transcript += `${normalize(await response.text())}\n\n`;
      // A compaction a turn left for the background is done before the next request, for a fixed transcript.
      await w.agent.compactions.idle();
    }
    assertGolden("http.txt", transcript);
    assertGolden("trace_http.jsonl", w.trace());
  } finally {
    await w.close();
  }
});
