/** Builders for HTTP tests: handler dependencies around a store, a real trace file and a controllable model. */
import { BackgroundCompactions } from "../src/session/background.ts";
import { LlmError } from "../src/errors.ts";
import { Authenticator } from "../src/http/auth.ts";
import { shuttingDown } from "../src/http/errors.ts";
import type { HandlerDeps } from "../src/http/deps.ts";
import { createHandler } from "../src/http/handler.ts";
import { type RunningServer, serveHttp } from "../src/http/server.ts";
import { SessionRunner } from "../src/session/runner.ts";
import type { ChatOptions, LLM } from "../src/llm/llm.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { TodoStore } from "../src/store/store.ts";
import { deterministicSummarizer, type Summarizer } from "../src/memory/summarizer.ts";
import { JsonlTracer } from "../src/trace/trace.ts";
import { SharedTrace } from "../src/trace/shared_trace.ts";
import type { ChatReply, Message } from "../src/types.ts";
import { realTools, requestTools } from "./_harness.ts";

/**
 * A model that answers by rule (arithmetic → calculator call, tool result → "The answer is N.", else an
 * echo) after an optional delay, and honours the abort signal: the test can see the signal reach it.
 */
export class RuleLLM implements LLM {
  delayMs: number;
  fail: LlmError | null = null;
  calls = 0;
  aborted = 0;
  /** Resolvers of calls waiting on `hold`. */
  #held: (() => void)[] = [];
  hold = false;
  /** Text written (and streamed) before a calculator call, as models often do; none by default. */
  preamble: string | null = null;

  constructor(delayMs = 0) {
    this.delayMs = delayMs;
  }

  /** Lets every held call go on. */
  release(): void {
    this.hold = false;
    for (const go of this.#held.splice(0)) go();
  }

  async chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    this.calls++;
    const { signal } = options;
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        clearTimeout(timer);
        this.aborted++;
        reject(new LlmError("LLM request was aborted", { kind: "aborted" }));
      };
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const timer = this.hold ? undefined : setTimeout(done, this.delayMs);
      if (this.hold) this.#held.push(done);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    if (this.fail) throw this.fail;
    const last = messages.at(-1)!;
    if (last.role === "tool") {
      const result = JSON.parse(last.content ?? "{}");
      const text = `The answer is ${result.data?.result}.`;
      // Streams like a provider: word by word, then the whole reply.
      for (const word of text.match(/\S+\s*/g) ?? []) options.onDelta?.(word);
      return reply(text);
    }
    const expression = /\d+\s*[-+*/]\s*\d+/.exec(last.content ?? "");
    if (expression) {
      if (this.preamble !== null) options.onDelta?.(this.preamble);
      return {
        content: this.preamble,
        toolCalls: [{
          id: `call_${this.calls}`,
          name: "calculator",
          arguments: JSON.stringify({ expression: expression[0] }),
        }],
        usage: { promptTokens: 10, completionTokens: 2, totalTokens: 12, cachedTokens: null },
        model: "rule",
      };
    }
    return reply(`echo: ${last.content}`);
  }
}

function reply(content: string): ChatReply {
  return {
    content,
    toolCalls: [],
    usage: { promptTokens: 10, completionTokens: 2, totalTokens: 12, cachedTokens: null },
    model: "rule",
  };
}

export interface HttpHarness {
  deps: HandlerDeps;
  handler: (request: Request) => Promise<Response>;
  llm: RuleLLM;
  store: SqliteStore;
  /** The private todos of self-contained chat completions, in order. */
  requestTodos: TodoStore[];
  tracePath: string;
  tracer: JsonlTracer;
  /** The store's trace table the tracer ships to and the trace route reads. */
  trace: SharedTrace;
  logs: string[];
  /** Aborts running turns as the server's shutdown does once its grace period is over (its 503 the reason). */
  shutdown: { abort(): void; readonly signal: AbortSignal };
  setShuttingDown(value: boolean): void;
  [Symbol.dispose](): void;
}

/** Handler deps on an in-memory store and a temp trace file; `tokens` turn auth on. */
export function httpHarness(
  options: {
    tokens?: { token: string; userId: string }[];
    delayMs?: number;
    maxBodyBytes?: number;
    /** Turns a session's queue admits behind the running one (the server uses 8). */
    maxWaiting?: number;
    /** Size at which the trace rotates. */
    traceMaxBytes?: number;
    /** Compaction: raw turns kept, the batch beyond them, the summarizer. @default {20, 10, deterministic} */
    compaction?: { maxRawTurns: number; compactBatch: number; summarizer: Summarizer };
    /** The model the turns ask, in place of the rule model (`llm` is still the rule model). */
    model?: LLM;
  } = {},
): HttpHarness {
  const dir = Deno.makeTempDirSync({ prefix: "mra-http-" });
  const tracePath = `${dir}/trace.jsonl`;
  const store = new SqliteStore(":memory:");
  const trace = new SharedTrace(store.trace);
  const tracer = new JsonlTracer(tracePath, {
    maxBytes: options.traceMaxBytes,
    onAppend: (event, line) => trace.add(event, line),
  });
  const llm = new RuleLLM(options.delayMs ?? 0);
  const logs: string[] = [];
  const requestTodos: TodoStore[] = [];
  const turns = new AbortController();
  const shutdown = { abort: () => turns.abort(shuttingDown()), signal: turns.signal };
  let stopping = false;
  const deps: HandlerDeps = {
    agent: {
      llm: options.model ?? llm,
      tools: realTools(store),
      maxSteps: 8,
      summarizer: options.compaction?.summarizer ?? deterministicSummarizer,
      maxRawTurns: options.compaction?.maxRawTurns ?? 20,
      compactBatch: options.compaction?.compactBatch,
      compactions: new BackgroundCompactions((event) => tracer.write(event)),
      maxCtxTokens: 6000,
    },
    store,
    requestTools: (todos) => {
      requestTodos.push(todos);
      return requestTools(todos);
    },
    emit: (event) => tracer.write(event),
    authenticator: new Authenticator(options.tokens ?? []),
    // The tests' requests name this host; a served harness listens on loopback.
    hosts: { allowed: ["agent.test"] },
    sessions: new SessionRunner({ queue: { maxWaiting: options.maxWaiting ?? 8 } }),
    maxBodyBytes: options.maxBodyBytes ?? 65536,
    trace,
    model: "rule",
    shutdownSignal: shutdown.signal,
    isShuttingDown: () => stopping,
    log: (line) => logs.push(line),
  };
  return {
    deps,
    handler: createHandler(deps),
    llm,
    store,
    requestTodos,
    tracePath,
    tracer,
    trace,
    logs,
    shutdown,
    setShuttingDown: (value) => (stopping = value),
    [Symbol.dispose]: () => {
      tracer.close();
      store.close();
      Deno.removeSync(dir, { recursive: true });
    },
  };
}

/** A JSON POST of `{message}` (or a raw body) to a session's messages route. */
export function postMessage(
  session: string,
  body: unknown,
  headers: Record<string, string> = {},
): Request {
  return new Request(`http://agent.test/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** Parses an SSE body into `{event, data}` frames. */
export function parseSse(text: string): { event: string; data: Record<string, unknown> }[] {
  return text.split("\n\n").filter((frame) => frame.trim() !== "").map((frame) => {
    const lines = frame.split("\n");
    const event = lines.find((l) => l.startsWith("event: "))!.slice(7);
    const data = JSON.parse(lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n"));
    return { event, data };
  });
}

export interface Served {
  url: string;
  server: RunningServer;
  stop: AbortController;
}

/**
 * Runs `fn` against a real server on 127.0.0.1 built from the harness's deps (with `overrides`), and always
 * stops it and waits for `finished`.
 */
export async function withServer(
  h: HttpHarness,
  fn: (served: Served) => Promise<void>,
  options: { graceSeconds?: number; overrides?: Partial<HandlerDeps> } = {},
): Promise<void> {
  const { graceSeconds = 5, overrides = {} } = options;
  // serveHttp supplies the lifecycle parts itself.
  const { shutdownSignal: _signal, isShuttingDown: _isShuttingDown, ...deps } = { ...h.deps, ...overrides };
  const stop = new AbortController();
  const server = serveHttp(deps, {
    hostname: "127.0.0.1",
    port: 0,
    stop: stop.signal,
    graceSeconds,
    onListen: () => {},
  });
  try {
    await fn({ url: `http://127.0.0.1:${server.port}`, server, stop });
  } finally {
    stop.abort();
    await server.finished;
  }
}

/** Polls `condition` every few milliseconds; fails naming `what` after `timeoutMs`. */
export async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
