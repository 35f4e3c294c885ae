/**
 * OpenTelemetry end to end: `deno task serve` with `OTEL_DENO=true` under its real permission flags, exporting
 * OTLP/HTTP JSON to a receiver on loopback; the span tree of a calculator turn, its GenAI attributes, the
 * flush at SIGTERM, and that no message content or key leaves the process. Nothing here reaches the internet.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readTrace } from "../src/trace/trace.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { type ReceivedSpan, startOtlpReceiver } from "./fixtures/otlp_receiver.ts";
import { childEnv, runProcess, spawnServe, tempDir } from "./_harness.ts";

const KEY = "sk-otel-sentinel-4f9c2a7e1b";
/** Appears only in the question: found in an export, it means content left the process. */
const MARKER = "zebra-quartz";
/** The fake model's reasoning: it goes back to the provider, and to no export and not to the trace. */
const THOUGHT = "walrus-thought";
const MODEL = "fake-model-7";
const SERVER = 2;
const CLIENT = 3;
const INTERNAL = 1;

function freePort(): number {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = probe.addr;
  probe.close();
  return port;
}

/**
 * `deno task serve` on a port it picks (read it with `port()` once it listens) with telemetry exported to `endpoint`. The batch delay is a minute, so spans
 * reach the receiver during the test only through the flush at shutdown.
 */
function startServe(
  dir: string,
  { providerUrl, endpoint, extra = {} }: {
    providerUrl: string;
    endpoint: string;
    extra?: Record<string, string>;
  },
) {
  return spawnServe(
    ["task", "serve"],
    childEnv(dir, {
      ...extra,
      NO_COLOR: "1",
      AGENT_PORT: "0",
      OPENAI_BASE_URL: providerUrl,
      OPENAI_API_KEY: KEY,
      MODEL,
      OTEL_DENO: "true",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_BSP_SCHEDULE_DELAY: "60000",
    }),
  );
}

async function post(port: number, session: string, message: string): Promise<Record<string, unknown>> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body;
}

/**
 * Posts a turn as SSE and resolves once the response's headers arrive: the server sends them only once the
 * turn is in its session's queue, so a turn running there is still ahead of it. `stream` is the whole body.
 */
async function postQueued(
  port: number,
  session: string,
  message: string,
): Promise<{ runId: string; stream: Promise<string> }> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({ message }),
  });
  assert.equal(response.status, 200);
  return { runId: response.headers.get("x-run-id")!, stream: response.text() };
}

/** Polls `condition` every few milliseconds; fails naming `what` after `timeoutMs`. */
async function until(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function childrenOf(spans: ReceivedSpan[], parent: ReceivedSpan): ReceivedSpan[] {
  return spans.filter((s) => s.parentSpanId === parent.spanId).sort((a, b) => (a.start < b.start ? -1 : 1));
}

function only(spans: ReceivedSpan[], what: string, test: (span: ReceivedSpan) => boolean): ReceivedSpan {
  const found = spans.filter(test);
  assert.equal(found.length, 1, `exactly one ${what}: ${JSON.stringify(spans.map((s) => s.name))}`);
  return found[0];
}

function chatAttributes(providerPort: number, finishReason: string): Record<string, unknown> {
  return {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": MODEL,
    "server.address": "127.0.0.1",
    "server.port": providerPort,
    "gen_ai.response.model": MODEL,
    "gen_ai.response.id": "chatcmpl-fake",
    "gen_ai.usage.input_tokens": 10,
    "gen_ai.usage.output_tokens": 5,
    "gen_ai.usage.cache_read.input_tokens": 4,
    "gen_ai.response.finish_reasons": [finishReason],
    "mini_agent.llm.retries": 0,
  };
}

Deno.test("serve with OTEL_DENO=true exports a calculator turn as invoke_agent > chat, execute_tool, chat under its request, fetch under each chat", async () => {
  using dir = tempDir();
  // Each reply says 4 of its 10 prompt tokens came from the provider's cache.
  const provider = startFakeProvider({ reasoning: THOUGHT, cachedTokens: 4 });
  const receiver = startOtlpReceiver();
  const serve = startServe(dir.path, { providerUrl: provider.url, endpoint: receiver.url });
  let body: Record<string, unknown>;
  try {
    await serve.listening;
    const port = serve.port();
    body = await post(port, "otel-1", `what is 12*(3+4)? ${MARKER}`);
    assert.equal(body.answer, "The answer is 84.");
    assert.equal(receiver.spans().length, 0, "nothing is exported before the batch delay or shutdown");
  } finally {
    const code = await serve.stop();
    assert.equal(code, 0, serve.stderr());
  }
  try {
    await until(() => receiver.spans().some((s) => s.name.startsWith("invoke_agent")), "the flush at exit");
    assert.doesNotMatch(serve.stderr(), /Cannot record/);
    const spans = receiver.spans();
    const request = only(
      spans,
      "request span",
      (s) => s.attributes["url.path"] === "/v1/sessions/otel-1/messages",
    );
    assert.equal(request.kind, SERVER);
    assert.equal(request.scope, "deno");
    assert.equal(request.parentSpanId, "", "the request's span is the root");
    const tree = spans.filter((s) => s.traceId === request.traceId);

    const [agent, ...others] = childrenOf(tree, request);
    assert.deepEqual([agent.name, others.length], ["invoke_agent mini-agent", 0]);
    assert.deepEqual([agent.kind, agent.status], [INTERNAL, 0]);
    assert.deepEqual(agent.attributes, {
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.agent.name": "mini-agent",
      "gen_ai.conversation.id": "otel-1",
      "gen_ai.provider.name": "openai",
      "gen_ai.request.model": MODEL,
      "mini_agent.run.id": body.run_id,
      "mini_agent.turn": 1,
      "mini_agent.turn.outcome": "answered",
      "mini_agent.tool_calls": 1,
      "gen_ai.usage.input_tokens": 20,
      "gen_ai.usage.output_tokens": 10,
      "gen_ai.usage.cache_read.input_tokens": 8,
    });

    const steps = childrenOf(tree, agent);
    assert.deepEqual(steps.map((s) => s.name), [`chat ${MODEL}`, "execute_tool calculator", `chat ${MODEL}`]);
    const [ask, tool, answer] = steps;
    const providerPort = Number(new URL(provider.url).port);
    assert.deepEqual(ask.attributes, chatAttributes(providerPort, "tool_calls"));
    assert.deepEqual(answer.attributes, chatAttributes(providerPort, "stop"));
    for (const chat of [ask, answer]) {
      assert.deepEqual([chat.kind, chat.status], [CLIENT, 0]);
      const fetches = childrenOf(tree, chat);
      assert.deepEqual(fetches.map((s) => [s.scope, s.kind, s.name]), [["deno", CLIENT, "POST"]]);
      assert.equal(fetches[0].attributes["url.full"], `${provider.url}/chat/completions`);
    }

    const [call] = readTrace(join(dir.path, "trace", "traces.jsonl"), (e) => e.event === "tool_call");
    assert.deepEqual([tool.kind, tool.status], [INTERNAL, 0]);
    assert.deepEqual(tool.attributes, {
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": "calculator",
      "gen_ai.tool.call.id": (call.data as { id: string }).id,
      "gen_ai.tool.type": "function",
    });
    assert.equal(tree.length, 7, "the request, the turn, two model calls with a fetch each, one tool call");

    // The GenAI client metrics, from the counts the store keeps: two calls of 10 prompt and 5 completion tokens.
    await until(() => receiver.histograms().length > 0, "the metrics' flush at exit");
    const points = receiver.histograms().filter((p) => p.scope === "mini-runtime-agent");
    const common = {
      "gen_ai.operation.name": "chat",
      "gen_ai.provider.name": "openai",
      "gen_ai.request.model": MODEL,
      "gen_ai.response.model": MODEL,
    };
    const tokens = points.filter((p) => p.metric === "gen_ai.client.token.usage")
      .map(({ unit, attributes, count, sum }) => ({ unit, attributes, count, sum }))
      .sort((a, b) =>
        String(a.attributes["gen_ai.token.type"]).localeCompare(String(b.attributes["gen_ai.token.type"]))
      );
    assert.deepEqual(tokens, [
      { unit: "{token}", attributes: { ...common, "gen_ai.token.type": "input" }, count: 2, sum: 20 },
      { unit: "{token}", attributes: { ...common, "gen_ai.token.type": "output" }, count: 2, sum: 10 },
    ]);
    const [duration, ...more] = points.filter((p) => p.metric === "gen_ai.client.operation.duration");
    assert.equal(more.length, 0);
    assert.deepEqual([duration.unit, duration.attributes, duration.count], ["s", common, 2]);
    assert.ok(duration.sum > 0 && duration.sum < 10, `duration ${duration.sum} s`);

    // Its lines on stderr ("listening on", "stopped") are information, not errors: none is exported as one.
    assert.match(serve.stderr(), /listening on[^]*stopped/);
    assert.deepEqual(receiver.logs().filter((log) => log.severity === "ERROR"), []);

    // The trace file (the audit log) holds the content; no export does, nor the key.
    const traced = Deno.readTextFileSync(join(dir.path, "trace", "traces.jsonl"));
    assert.ok(traced.includes(MARKER));
    assert.ok(!traced.includes(THOUGHT), "the trace never holds reasoning");
    assert.ok(JSON.stringify(provider.requests[1]).includes(THOUGHT), "it went back to its provider");
    for (const { path, body } of receiver.bodies) {
      for (const secret of [MARKER, THOUGHT, "12*(3+4)", "The answer is", KEY]) {
        assert.ok(!body.includes(secret), `${path} carries ${JSON.stringify(secret)}`);
      }
    }
  } finally {
    await Promise.all([provider.close(), receiver.close()]);
  }
});

Deno.test("a turn that waited behind another of its session is a child of its own request's span, its compaction span holding the summary call", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const receiver = startOtlpReceiver();
  // One raw turn kept and no batch: the second turn's answer starts a compaction of the first, in the
  // background; its span is still the second turn's child.
  const extra = { AGENT_MAX_RAW_TURNS: "1", AGENT_COMPACT_BATCH: "0" };
  const serve = startServe(dir.path, { providerUrl: provider.url, endpoint: receiver.url, extra });
  let release!: () => void;
  provider.hold = new Promise((resolve) => (release = resolve));
  const runIds: unknown[] = [];
  try {
    await serve.listening;
    const port = serve.port();
    // The calculator fails on this one: its span is marked failed, and the tool's error text stays home.
    const first = post(port, "queued", "what is 6/0?");
    // The first turn's answer is held mid-stream: the second request has to wait for it.
    await until(() => provider.requests.length === 2, "the first turn's answer to be asked for");
    // Queued behind it, as its response's headers say, before the first turn goes on.
    const second = await postQueued(port, "queued", "hello");
    release();
    const [answered, streamed] = await Promise.all([first, second.stream]);
    assert.match(streamed, /event: run_end/);
    runIds.push(answered.run_id, second.runId);
  } finally {
    release();
    const code = await serve.stop();
    assert.equal(code, 0, serve.stderr());
  }
  try {
    await until(
      () => receiver.spans().filter((s) => s.name.startsWith("invoke_agent")).length === 2,
      "spans",
    );
    const spans = receiver.spans();
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const [firstTurn, secondTurn] = runIds.map((id) =>
      only(spans, `turn ${id}`, (s) => s.attributes["mini_agent.run.id"] === id)
    );
    const [firstRequest, secondRequest] = [firstTurn, secondTurn].map((s) => byId.get(s.parentSpanId)!);
    assert.equal(secondRequest.kind, SERVER);
    assert.notEqual(secondRequest.spanId, firstRequest.spanId, "not the request of the turn before it");
    assert.equal(secondRequest.traceId, secondTurn.traceId);
    assert.ok(secondRequest.start < firstTurn.end, "the second request came while the first turn ran");

    const names = (parent: ReceivedSpan) => childrenOf(spans, parent).map((s) => s.name);
    assert.deepEqual(names(firstTurn), [`chat ${MODEL}`, "execute_tool calculator", `chat ${MODEL}`]);
    assert.deepEqual(names(secondTurn), [`chat ${MODEL}`, "compaction"]);
    const failed = childrenOf(spans, firstTurn)[1];
    assert.deepEqual([failed.status, failed.attributes["error.type"]], [2, "tool_error"]);
    assert.ok(receiver.bodies.every(({ body }) => !body.includes("by zero")), "no tool error text");
    const compaction = only(spans, "compaction", (s) => s.name === "compaction");
    assert.equal(compaction.parentSpanId, secondTurn.spanId);
    assert.deepEqual(compaction.attributes, {
      "mini_agent.compaction.trigger": "turns",
      "mini_agent.compaction.messages": 4,
    });
    const [summary] = childrenOf(spans, compaction);
    assert.equal(summary.name, `chat ${MODEL}`);
    assert.deepEqual(childrenOf(spans, summary).map((s) => [s.scope, s.name]), [["deno", "POST"]]);
  } finally {
    await Promise.all([provider.close(), receiver.close()]);
  }
});

Deno.test("with OTEL_DENO=true but no package at hand, chat still answers and says in one line that its spans are off", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  // A port nothing listens on: the registry and the collector are both unreachable.
  const closed = `http://127.0.0.1:${freePort()}`;
  try {
    const result = await runProcess("deno", ["task", "--quiet", "chat", "what is 12*(3+4)?"], {
      clearEnv: true,
      env: {
        PATH: Deno.env.get("PATH") ?? "",
        HOME: dir.path,
        DENO_DIR: join(dir.path, "deno-dir"),
        NPM_CONFIG_REGISTRY: `${closed}/`,
        OPENAI_BASE_URL: provider.url,
        OPENAI_API_KEY: KEY,
        AGENT_DB_PATH: join(dir.path, "db", "sessions.db"),
        AGENT_TRACE_PATH: join(dir.path, "trace", "traces.jsonl"),
        AGENT_HISTORY_PATH: join(dir.path, "db", "chat_history"),
        OTEL_DENO: "true",
        OTEL_EXPORTER_OTLP_ENDPOINT: closed,
      },
    });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "The answer is 84.\n");
    const lines = result.stderr.split("\n").filter((line) => line.includes("spans"));
    assert.equal(lines.length, 1, result.stderr);
    assert.match(
      lines[0],
      /^Cannot record the agent's spans \(OTEL_DENO=true\): .+; Deno's own spans still go out$/,
    );
    assert.ok(!result.stderr.includes(KEY));
  } finally {
    await provider.close();
  }
});

Deno.test("a one-shot run with deno task --quiet exports its spans but no log record with the question", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const receiver = startOtlpReceiver();
  try {
    const result = await runProcess("deno", ["task", "--quiet", "chat", `what is 12*(3+4)? ${MARKER}`], {
      env: childEnv(dir.path, {
        NO_COLOR: "1",
        OPENAI_BASE_URL: provider.url,
        OPENAI_API_KEY: KEY,
        MODEL,
        OTEL_DENO: "true",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      }),
    });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "The answer is 84.\n");
    await until(() => receiver.spans().some((s) => s.name.startsWith("invoke_agent")), "the flush at exit");
    // Without --quiet, Deno's task runner would export its header line, the question in it.
    assert.deepEqual(receiver.logs().filter((log) => log.scope === "deno::tools::task"), []);
    assert.deepEqual(receiver.logs().filter((log) => log.severity === "ERROR"), []);
    for (const { path, body } of receiver.bodies) {
      for (const secret of [MARKER, "12*(3+4)", "The answer is", KEY]) {
        assert.ok(!body.includes(secret), `${path} carries ${JSON.stringify(secret)}`);
      }
    }
  } finally {
    await Promise.all([provider.close(), receiver.close()]);
  }
});
