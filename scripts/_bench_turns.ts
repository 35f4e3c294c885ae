/**
 * The bench's in-process sections: per-turn overhead (A/B/C/D by round), the runtime's own work (1b) and
 * growth, on a runtime built as `src/runtime.ts` builds it except that its `fetch` records every body it sends.
 * @module
 */
import { BackgroundCompactions } from "../src/session/background.ts";
import { join } from "node:path";
import { estimateRequestTokens } from "../src/memory/plan.ts";
import { loadConfig } from "../src/config.ts";
import { createLlmFromConfig } from "../src/llm/client.ts";
import { type Agent, runTurn } from "../src/agent/loop.ts";
import type { RunEvent } from "../src/events.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createLlmSummarizer, SUMMARY_PROMPT } from "../src/memory/summarizer.ts";
import { createBuiltinTools } from "../src/tools/builtin.ts";
import { evaluate } from "../src/tools/calculator.ts";
import { SYSTEM_PROMPT } from "../src/agent/context.ts";
import { JsonlTracer } from "../src/trace/trace.ts";
import { sharedTraceOf } from "../src/store/open.ts";
import type { Message, ToolSchema } from "../src/types.ts";
import { answer, completion } from "./_fake_provider.ts";
import { distribution, makeTempDir, median, startProvider } from "./_bench_process.ts";

// The summary request's last message starts with the prompt: its JSON, without the closing quote.
const SUMMARY_PROMPT_JSON = JSON.stringify(SUMMARY_PROMPT).slice(0, -1);

/** Options of {@linkcode openBenchRuntime}. */
export interface BenchRuntimeOptions {
  /** What the client sends with. @default {fetch} */
  fetch?: typeof fetch;
  /** `false` keeps nothing: store in `:memory:`, no trace file (variant D). @default {true} */
  persist?: boolean;
  /** The user's memory across sessions, as AGENT_USER_MEMORY turns it on or off. @default {its default, on} */
  userMemory?: boolean;
  /** The wire format (`LLM_API`), `baseUrl` holding its `/v1` for all three. @default {"chat"} */
  api?: "chat" | "anthropic" | "responses";
}

/** A runtime on `sessions.db` and `traces.jsonl` in `dir` against `baseUrl`, streaming off. */
export function openBenchRuntime(dir: string, baseUrl: string, options: BenchRuntimeOptions = {}) {
  const { fetch: send = fetch, persist = true } = options;
  const [dbPath, tracePath] = [join(dir, "sessions.db"), join(dir, "traces.jsonl")];
  const env = {
    OPENAI_BASE_URL: baseUrl,
    ANTHROPIC_BASE_URL: baseUrl.replace(/\/v1$/, ""),
    LLM_API: options.api ?? "chat",
    AGENT_DB_PATH: dbPath,
    AGENT_TRACE_PATH: tracePath,
  };
  const config = loadConfig({ ...env, AGENT_STREAM: "0" });
  let sent: string[] = [];
  // Keeps a reference to each body: no copy and no classification inside the timed turn.
  const recording: typeof fetch = (input, init) => {
    if (typeof init?.body === "string") sent.push(init.body);
    return send(input, init);
  };
  const store = new SqliteStore(persist ? dbPath : ":memory:");
  // As the runtime does: each event goes on to the database's trace table.
  const shared = persist ? sharedTraceOf(store) : null;
  const tracer = persist
    ? new JsonlTracer(tracePath, {
      maxPayloadChars: config.traceMaxPayloadChars,
      secrets: [config.apiKey],
      onAppend: (event, line) => shared?.add(event, line),
    })
    : null;
  const llm = createLlmFromConfig(config, { stream: false, fetch: recording });
  const compactions = { ok: 0, failed: 0 };
  const { maxToolIters: maxSteps, maxRawTurns, maxCtxTokens } = config;
  const { userMemory: memoryOn = config.userMemory } = options;
  const userMemory = memoryOn ? { items: config.userMemoryItems, recall: config.userMemoryRecall } : null;
  const memoryItems = userMemory?.items ?? null;
  const [tools, summarizer] = [createBuiltinTools(store, { memoryItems }), createLlmSummarizer(llm)];
  const run = {
    emit: (event: RunEvent) => {
      if (event.event === "compact") compactions[event.data.ok ? "ok" : "failed"]++;
      tracer?.write(event);
    },
    store,
  };
  const background = new BackgroundCompactions(run.emit);
  const agent: Agent = {
    ...{ llm, tools, maxSteps, summarizer, maxRawTurns, maxCtxTokens },
    ...{ compactBatch: config.compactBatch, compactions: background, userMemory },
  };
  return {
    ...{ config, store, dbPath, tracePath, url: `${config.baseUrl}/chat/completions`, compactions },
    /** The tool schemas the runtime offers the model. */
    tools: tools.schemas(),
    takeRequests: () => {
      const taken = sent;
      sent = [];
      return taken.map((body) => ({ body, summary: body.includes(SUMMARY_PROMPT_JSON) }));
    },
    /** A turn; `variant` changes the agent for it alone (the recall section turns memory off so). */
    turn: (sessionId: string, message: string, userId = "bench", variant: Partial<Agent> = {}) =>
      runTurn({ sessionId, message, userId }, { ...agent, ...variant }, run),
    /** Resolves once no background compaction is running. */
    idle: () => background.idle(),
    close: async () => {
      await background.close();
      tracer?.close();
      await shared?.close();
      await store.close();
    },
  };
}

/** The floor of one turn: POST each body in order and read each reply with `json()`, nothing else. */
export async function floorTurn(url: string, bodies: readonly string[]): Promise<void> {
  for (const body of bodies) {
    const headers = { "Content-Type": "application/json" };
    const response = await fetch(url, { method: "POST", headers, body });
    const json = await response.json();
    if (!response.ok) {
      throw new Error(`The floor's request failed: HTTP ${response.status} ${JSON.stringify(json)}`);
    }
  }
}

/** E's state: the messages of its one session and what it sends with them. */
interface PlainLoop {
  url: string;
  model: string;
  tools: unknown[];
  messages: Record<string, unknown>[];
}

/**
 * E: an agent loop as one writes it by hand with `fetch` — the messages in an array (the last
 * AGENT_MAX_RAW_TURNS turns), `JSON.stringify`, `json()`, the calculator run in place; no store, trace,
 * events, limits, retries or compaction. The fair "plain fetch loop" to compare a runtime with.
 */
async function plainLoopTurn(loop: PlainLoop, question: string, keptTurns: number): Promise<void> {
  loop.messages.push({ role: "user", content: question });
  for (;;) {
    const messages = [{ role: "system", content: SYSTEM_PROMPT }, ...loop.messages];
    const body = JSON.stringify({ model: loop.model, messages, tools: loop.tools });
    const response = await fetch(loop.url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body,
    });
    const message = (await response.json()).choices[0].message;
    loop.messages.push(message);
    const calls: { id: string; function: { arguments: string } }[] = message.tool_calls ?? [];
    if (calls.length === 0) break;
    for (const call of calls) {
      const { expression } = JSON.parse(call.function.arguments);
      const content = JSON.stringify({
        ok: true,
        data: { expression, result: evaluate(expression) },
        error: null,
      });
      loop.messages.push({ role: "tool", tool_call_id: call.id, content });
    }
  }
  const starts = loop.messages.flatMap((m, i) => (m.role === "user" ? [i] : []));
  if (starts.length > keptTurns) loop.messages.splice(0, starts[starts.length - keptTurns]);
}

/** The runtime's own token estimate of a body it sent: the budget is judged with compaction's ruler. */
function estimateBodyTokens(body: string): number {
  type Call = { id: string; function: { name: string; arguments: string } };
  type Wire = { role: Message["role"]; content: string | null; tool_calls?: Call[]; tool_call_id?: string };
  const parsed = JSON.parse(body) as { messages: Wire[]; tools?: { function: ToolSchema }[] };
  const messages = parsed.messages.map((m): Message => ({
    role: m.role,
    content: m.content,
    toolCalls: m.tool_calls?.map((c) => ({
      id: c.id,
      name: c.function.name,
      arguments: c.function.arguments,
    })),
    toolCallId: m.tool_call_id,
  }));
  return estimateRequestTokens(messages, (parsed.tools ?? []).map((t) => t.function));
}

/** Bytes of the longest common prefix of `a` and `b`. Pure. */
export function commonPrefixBytes(a: Uint8Array, b: Uint8Array): number {
  const end = Math.min(a.length, b.length);
  let i = 0;
  while (i < end && a[i] === b[i]) i++;
  return i;
}

/**
 * How much of each request body repeats the one before it: what a provider's prompt cache, which matches a
 * request's prefix, can find again. Fed one session's chat bodies in order.
 */
export class PrefixMeter {
  #encoder = new TextEncoder();
  #previous: { bytes: Uint8Array; tools: string } | null = null;
  #total = 0;
  #shared = 0;
  #sharedTools = 0;
  #shares: number[] = [];

  /** Counts `body`, the session's next request. */
  add(body: string): void {
    const bytes = this.#encoder.encode(body);
    const tools = JSON.stringify(JSON.parse(body).tools ?? null);
    this.#total += bytes.length;
    const previous = this.#previous;
    this.#previous = { bytes, tools };
    if (previous === null) return;
    const shared = commonPrefixBytes(previous.bytes, bytes);
    this.#shared += shared;
    this.#shares.push(shared / bytes.length);
    // The tools come after the messages in the body, but providers read them first (the same bytes again).
    const tail = `,"tools":${tools}}`;
    if (tools === previous.tools && body.endsWith(tail) && shared <= bytes.length - tail.length) {
      this.#sharedTools += this.#encoder.encode(tail).length - 2;
    }
  }

  /**
   * `share`: the bytes of each body's common prefix with the one before, over all the bodies' bytes;
   * `withTools`: the same counting an unchanged tool list as repeated; `perRequest`: each body's share.
   */
  result() {
    const share = this.#total === 0 ? 0 : this.#shared / this.#total;
    const withTools = this.#total === 0 ? 0 : (this.#shared + this.#sharedTools) / this.#total;
    return {
      requests: this.#shares.length + (this.#previous === null ? 0 : 1),
      share,
      withTools,
      perRequest: distribution(this.#shares),
    };
  }
}

/** The turns over which growth counts model requests per turn (the target: at most 2.15). */
const REQUESTS_PER_TURN_TURNS = 200;

/** The user message of turn `i` (from 0): arithmetic, so each turn is a calculator turn with two calls. */
export function turnMessage(i: number): string {
  return `what is ${i + 1}*(3+4)?`;
}

/** Times one calculator turn, fails unless it is answered, and returns its time and the bodies it sent. */
export async function timedTurn(
  runtime: ReturnType<typeof openBenchRuntime>,
  sessionId: string,
  i: number,
  as: { userId?: string; variant?: Partial<Agent> } = {},
) {
  const started = performance.now();
  await answeredTurn(runtime, sessionId, i, as);
  const ms = performance.now() - started;
  return { ms, sent: runtime.takeRequests() };
}

/** Runs turn `i` (as {@linkcode timedTurn}) and fails unless it is answered; takes none of the bodies it sent. */
export async function answeredTurn(
  runtime: ReturnType<typeof openBenchRuntime>,
  sessionId: string,
  i: number,
  as: { userId?: string; variant?: Partial<Agent> } = {},
): Promise<void> {
  const { outcome } = await runtime.turn(sessionId, turnMessage(i), as.userId, as.variant);
  if (outcome !== "answered") throw new Error(`Turn ${i + 1} of ${sessionId} ended ${outcome}`);
}

export async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

function checkSizes(sizes: Record<string, number>, min = 1): void {
  for (const [name, value] of Object.entries(sizes)) {
    if (!Number.isInteger(value) || value < min) {
      throw new RangeError(`${name} must be >= ${min}, got ${value}`);
    }
  }
}

/**
 * A calculator turn through the full stack (A) against the plain-fetch floor sending the same bodies (B, and
 * C with the summary calls) and the stack persisting nothing (D), the model answering after `latencyMs`. An
 * unmeasured round records the bodies and warms every path; then each round runs A, D, B and C over `turns`
 * turns. A background compaction runs beside the turns after the one that triggered it, as in use.
 */
export async function measureOverhead(options: { rounds?: number; turns?: number; latencyMs?: number } = {}) {
  const { rounds = 10, turns = 100, latencyMs = 0 } = options;
  checkSizes({ rounds, turns });
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider(latencyMs);
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-overhead-");
  cleanup.defer(() => temp.remove());
  const runtime = openBenchRuntime(temp.path, provider.url);
  cleanup.defer(() => runtime.close());
  const volatile = openBenchRuntime(temp.path, provider.url, { persist: false });
  cleanup.defer(() => volatile.close());
  const captured = [];
  for (let i = 0; i < turns; i++) {
    captured.push((await timedTurn(runtime, "capture", i)).sent);
    await timedTurn(volatile, "capture", i);
  }
  await runtime.idle();
  captured.at(-1)!.push(...runtime.takeRequests());
  const chat = captured.map((sent) => sent.filter((r) => !r.summary).map((r) => r.body));
  const all = captured.map((sent) => sent.map((r) => r.body));
  const compacting = captured.map((sent) => sent.some((r) => r.summary));
  chat.forEach((bodies, i) => {
    if (bodies.length !== 2) throw new Error(`Turn ${i + 1} sent ${bodies.length} chat requests, not 2`);
  });
  for (const bodies of chat) await floorTurn(runtime.url, bodies);

  const [a, b, c, d, e]: number[][][] = [[], [], [], [], []];
  const tools = runtime.tools.map((schema) => ({ type: "function", function: schema }));
  const plainLoop = () => ({ url: runtime.url, model: runtime.config.model, tools, messages: [] });
  let summaryCalls = 0;
  for (let r = 0; r < rounds; r++) {
    const [ra, rb, rc, rd, re]: number[][] = [[], [], [], [], []];
    for (let i = 0; i < turns; i++) {
      const { ms, sent } = await timedTurn(runtime, `round-${r}`, i);
      ra.push(ms);
      summaryCalls += sent.filter((s) => s.summary).length;
    }
    await runtime.idle();
    summaryCalls += runtime.takeRequests().length;
    for (let i = 0; i < turns; i++) rd.push((await timedTurn(volatile, `round-${r}`, i)).ms);
    await volatile.idle();
    for (let i = 0; i < turns; i++) rb.push(await timed(() => floorTurn(runtime.url, chat[i])));
    for (let i = 0; i < turns; i++) rc.push(await timed(() => floorTurn(runtime.url, all[i])));
    const loop = plainLoop();
    const kept = runtime.config.maxRawTurns;
    for (let i = 0; i < turns; i++) re.push(await timed(() => plainLoopTurn(loop, turnMessage(i), kept)));
    a.push(ra), b.push(rb), c.push(rc), d.push(rd), e.push(re);
  }
  const split = (rows: number[][]) => ({
    all: distribution(rows.flat()),
    plain: distribution(rows.flatMap((row) => row.filter((_, i) => !compacting[i]))),
    besideCompaction: distribution(rows.flatMap((row) => row.filter((_, i) => compacting[i]))),
  });
  const [A, B, C, D, E] = [split(a), split(b), distribution(c.flat()), split(d), distribution(e.flat())];
  return {
    latencyMs,
    rounds,
    turnsPerRound: turns,
    runtime: A,
    floor: B,
    floorWithSummaries: C,
    inMemory: D,
    plainLoop: E,
    ratio: A.all.median / B.all.median,
    plainLoopRatio: A.all.median / E.median,
    p95Ratio: A.all.p95 / B.all.p95,
    ratioWithSummaries: A.all.median / C.median,
    inMemoryRatio: D.all.median / B.all.median,
    roundRatios: a.map((row, r) => median(row) / median(b[r])),
    summaryCallsPerRound: summaryCalls / rounds,
  };
}

const ENCODER = new TextEncoder();

/**
 * A model answered inside the process, by the bench provider's rules, for `fetch`: `stubMs()` is the time it
 * took itself, to be taken out of what the runtime is timed for.
 */
export function inProcessModel(): { fetch: typeof fetch; stubMs: () => number } {
  let stubMs = 0;
  const model: typeof fetch = (_input, init) => {
    const started = performance.now();
    const text = String(init?.body ?? "{}");
    const body = JSON.parse(text);
    const reply = JSON.stringify(completion(String(body.model), answer(body).message, text.length));
    // With its length, as the fake provider's HTTP replies come (and a provider's), so the client reads
    // the body as it does over a socket.
    const headers = {
      "Content-Type": "application/json",
      "Content-Length": String(ENCODER.encode(reply).length),
    };
    const response = new Response(reply, { headers });
    stubMs += performance.now() - started;
    return Promise.resolve(response);
  };
  return { fetch: model, stubMs: () => stubMs };
}

/** The same turns with the model answered inside the process (no socket): the runtime's own work (1b). */
export async function measureRuntimeWork(options: { rounds?: number; turns?: number } = {}) {
  const { rounds = 10, turns = 100 } = options;
  checkSizes({ rounds, turns });
  const { fetch: model, stubMs: stubTime } = inProcessModel();
  await using cleanup = new AsyncDisposableStack();
  const temp = await makeTempDir("mra-bench-work-");
  cleanup.defer(() => temp.remove());
  // The base URL is never dialled: every request goes to the stub.
  const runtime = openBenchRuntime(temp.path, "http://127.0.0.1:9/v1", { fetch: model });
  cleanup.defer(() => runtime.close());
  const [all, compactions, stub]: number[][] = [[], [], []];
  // The runtime's work besides the stub's, in µs, of what `work` runs.
  const own = async (work: () => Promise<unknown>) => {
    const stubBefore = stubTime();
    const elapsed = await timed(work);
    stub.push((stubTime() - stubBefore) * 1000);
    return (elapsed - (stubTime() - stubBefore)) * 1000;
  };
  for (let r = -1; r < rounds; r++) {
    for (let i = 0; i < turns; i++) {
      // The turn alone: the bodies it sent are classified after (takeRequests), outside the time.
      const turn = await own(() => answeredTurn(runtime, `work-${r}`, i));
      // With the model in-process nothing yields to the timer that starts a background compaction, so the
      // one a turn started runs here, timed on its own.
      const compaction = await own(() => runtime.idle());
      const compacted = runtime.takeRequests().some((s) => s.summary);
      if (r < 0) continue; // the warm-up round
      all.push(turn);
      if (compacted) compactions.push(compaction);
    }
  }
  return {
    rounds,
    turnsPerRound: turns,
    all: distribution(all),
    backgroundCompaction: distribution(compactions),
    compactionsPerTurn: compactions.length / all.length,
    stubMedianUs: median(stub),
  };
}

/**
 * One session of `turns` calculator turns with the default thresholds. Each turn is followed by a reference
 * turn (turns 1–10 of short sessions, which never compact), so machine drift is told apart from growth.
 */
export async function measureGrowth(options: { turns?: number } = {}) {
  const { turns = 1000 } = options;
  checkSizes({ turns }, 2);
  await using cleanup = new AsyncDisposableStack();
  const provider = await startProvider();
  cleanup.defer(() => provider.close());
  const temp = await makeTempDir("mra-bench-growth-");
  cleanup.defer(() => temp.remove());
  const runtime = openBenchRuntime(temp.path, provider.url);
  cleanup.defer(() => runtime.close());
  for (let i = 0; i < 5; i++) await runtime.turn("warmup", turnMessage(i));
  runtime.takeRequests();
  const summariesBefore = await provider.summaries();
  const compactionsBefore = { ...runtime.compactions };
  const [times, reference]: number[][] = [[], []];
  let [first, last, maxTokens] = [[] as number[], [] as number[], 0];
  // Model requests of the first `counted` turns: their chat calls and the summary calls they caused (a
  // background one lands in the reference turn that follows; reference sessions never compact).
  const counted = Math.min(REQUESTS_PER_TURN_TURNS, turns);
  let requests = 0;
  const prefix = new PrefixMeter();
  for (let i = 0; i < turns; i++) {
    const { ms, sent } = await timedTurn(runtime, "growth", i);
    times.push(ms);
    const chat = sent.filter((s) => !s.summary).map((s) => s.body);
    for (const body of chat) prefix.add(body);
    const bytes = chat.map((body) => new TextEncoder().encode(body).byteLength);
    if (i === 0) first = bytes;
    last = bytes;
    maxTokens = Math.max(maxTokens, ...chat.map(estimateBodyTokens));
    const after = await timedTurn(runtime, `reference-${Math.floor(i / 10)}`, i % 10);
    reference.push(after.ms);
    if (i < counted) requests += sent.length + after.sent.filter((s) => s.summary).length;
  }
  await runtime.idle();
  const window = Math.min(50, Math.floor(turns / 2));
  const [firstMedianMs, lastMedianMs] = [median(times.slice(0, window)), median(times.slice(-window))];
  const drift = median(reference.slice(-window)) / median(reference.slice(0, window));
  return {
    turns,
    window,
    firstMedianMs,
    lastMedianMs,
    ratio: lastMedianMs / firstMedianMs,
    driftCorrectedRatio: lastMedianMs / firstMedianMs / drift,
    requestBytesFirstTurn: first,
    requestBytesLastTurn: last,
    summaryCalls: (await provider.summaries()) - summariesBefore,
    modelRequestsPerTurn: requests / counted,
    modelRequestsCountedTurns: counted,
    compactions: {
      ok: runtime.compactions.ok - compactionsBefore.ok,
      failed: runtime.compactions.failed - compactionsBefore.failed,
    },
    requestPrefix: prefix.result(),
    maxRequestTokens: maxTokens,
    maxCtxTokens: runtime.config.maxCtxTokens,
    underBudget: maxTokens <= runtime.config.maxCtxTokens,
    dbBytes: Deno.statSync(runtime.dbPath).size + Deno.statSync(`${runtime.dbPath}-wal`).size,
    traceBytes: Deno.statSync(runtime.tracePath).size,
  };
}

export type OverheadResult = Awaited<ReturnType<typeof measureOverhead>>;
export type WorkResult = Awaited<ReturnType<typeof measureRuntimeWork>>;
export type GrowthResult = Awaited<ReturnType<typeof measureGrowth>>;
