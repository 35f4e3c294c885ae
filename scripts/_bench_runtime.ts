/**
 * The bench's in-process runtime, built exactly as `src/main.ts` builds it (a SQLite file in WAL mode, a
 * JSONL trace file, the real fetch client with streaming off, the built-in tools, the model summarizer,
 * the default thresholds), with one difference: the client's injected `fetch` records every request body
 * it sends. Also the floor: a plain `fetch` loop replaying recorded bodies, with no runtime around it.
 * @module
 */
import { join } from "node:path";
import { estimateRequestTokens } from "../src/compactor.ts";
import { type Config, loadConfig } from "../src/config.ts";
import { createLlmFromConfig } from "../src/llm/openai.ts";
import { runTurn, type TurnDeps } from "../src/loop.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createLlmSummarizer, SUMMARY_PROMPT } from "../src/summarizer.ts";
import { createBuiltinTools } from "../src/tools/builtin.ts";
import { JsonlTracer } from "../src/trace.ts";
import type { Message, RunEvent, ToolSchema, TurnResult } from "../src/types.ts";

const SUMMARY_PROMPT_JSON = JSON.stringify(SUMMARY_PROMPT);

/** One request the client sent: its body and whether it was a summary call. */
export interface SentRequest {
  body: string;
  summary: boolean;
}

/** A runtime on files in `dir`, against the provider at `baseUrl`. */
export interface BenchRuntime {
  config: Readonly<Config>;
  deps: TurnDeps;
  store: SqliteStore;
  dbPath: string;
  tracePath: string;
  /** The chat URL the client posts to. */
  url: string;
  /** Successful and failed compactions so far (from the `compact` events). */
  compactions: { ok: number; failed: number };
  /** The requests sent since the last call, oldest first; clears the record. */
  takeRequests(): SentRequest[];
  /** Runs one turn on `sessionId`. */
  turn(sessionId: string, message: string): Promise<TurnResult>;
  close(): void;
}

/** Options of {@linkcode openBenchRuntime}. */
export interface BenchRuntimeOptions {
  /**
   * Environment overrides (e.g. `AGENT_MAX_RAW_TURNS`); unset variables take the runtime's defaults.
   * @default {{}}
   */
  env?: Record<string, string>;
  /**
   * The `fetch` the client sends with (the section on the runtime's own work answers in-process).
   * @default {globalThis.fetch}
   */
  fetch?: typeof fetch;
  /**
   * False keeps nothing: the store in `:memory:` and every trace event discarded, to tell what persisting
   * costs from what the rest of the runtime costs. The files' paths are still reported.
   * @default {true}
   */
  persist?: boolean;
}

/** Opens the runtime: `sessions.db` and `traces.jsonl` in `dir`, the provider at `baseUrl`. */
export function openBenchRuntime(
  dir: string,
  baseUrl: string,
  options: BenchRuntimeOptions = {},
): BenchRuntime {
  const { env = {}, fetch: send = fetch, persist = true } = options;
  const dbPath = join(dir, "sessions.db");
  const tracePath = join(dir, "traces.jsonl");
  const config = loadConfig({
    OPENAI_BASE_URL: baseUrl,
    AGENT_DB_PATH: dbPath,
    AGENT_TRACE_PATH: tracePath,
    AGENT_STREAM: "0",
    ...env,
  });
  let sent: string[] = [];
  // Keeps a reference to each body: no copy and no classification inside the timed turn.
  const recordingFetch: typeof fetch = (input, init) => {
    if (typeof init?.body === "string") sent.push(init.body);
    return send(input, init);
  };
  const store = new SqliteStore(persist ? config.dbPath : ":memory:");
  const tracer = persist
    ? new JsonlTracer(config.tracePath, {
      maxPayloadChars: config.traceMaxPayloadChars,
      secrets: [config.apiKey],
    })
    : null;
  const llm = createLlmFromConfig(config, { stream: false, fetch: recordingFetch });
  const compactions = { ok: 0, failed: 0 };
  const emit = (event: RunEvent) => {
    if (event.event === "compact") {
      if (event.data.ok === true) compactions.ok++;
      else compactions.failed++;
    }
    tracer?.write(event);
  };
  const deps: TurnDeps = {
    store,
    llm,
    tools: createBuiltinTools(store),
    emit,
    maxSteps: config.maxToolIters,
    summarizer: createLlmSummarizer(llm),
    maxRawTurns: config.maxRawTurns,
    maxCtxTokens: config.maxCtxTokens,
  };
  return {
    config,
    deps,
    store,
    dbPath,
    tracePath,
    url: `${config.baseUrl}/chat/completions`,
    compactions,
    takeRequests: () => {
      const taken = sent;
      sent = [];
      // The summary request is the one whose first message is the summary prompt.
      return taken.map((body) => ({ body, summary: body.includes(SUMMARY_PROMPT_JSON) }));
    },
    turn: (sessionId, message) => runTurn({ sessionId, userId: "bench", message }, deps),
    close: () => {
      tracer?.close();
      store.close();
    },
  };
}

/**
 * The floor of one turn: POSTs each body in order with the client's headers and reads each reply with
 * `await r.json()`, nothing else. Fails on a non-200, which would make the comparison meaningless.
 */
export async function floorTurn(url: string, bodies: readonly string[]): Promise<void> {
  for (const body of bodies) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body,
    });
    const json = await response.json();
    if (!response.ok) {
      throw new Error(`The floor's request failed: HTTP ${response.status} ${JSON.stringify(json)}`);
    }
  }
}

interface WireMessage {
  role: Message["role"];
  content: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/**
 * The runtime's own estimate (characters / 4, tool schemas included) of a request body it sent, so the
 * bench judges the budget with the same ruler as compaction does.
 */
export function estimateBodyTokens(body: string): number {
  const parsed = JSON.parse(body) as { messages: WireMessage[]; tools?: { function: ToolSchema }[] };
  const messages: Message[] = parsed.messages.map((m) => {
    const message: Message = { role: m.role, content: m.content };
    if (m.tool_calls !== undefined) {
      message.toolCalls = m.tool_calls.map((c) => ({
        id: c.id,
        name: c.function.name,
        arguments: c.function.arguments,
      }));
    }
    if (m.tool_call_id !== undefined) message.toolCallId = m.tool_call_id;
    return message;
  });
  return estimateRequestTokens(messages, (parsed.tools ?? []).map((t) => t.function));
}

/** UTF-8 length of a string: what the client puts on the wire. */
export function byteLength(text: string): number {
  return new TextEncoder().encode(text).byteLength;
}
