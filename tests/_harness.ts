/** Shared builders for tests: a store on a temp or in-memory database, real tools, a recording sink. */
import type { UserMemorySettings } from "../src/memory/turn_memory.ts";
import { PassThrough } from "node:stream";
import { fileURLToPath } from "node:url";
import type { Agent, RunOptions } from "../src/agent/loop.ts";
import { BackgroundCompactions } from "../src/session/background.ts";
import { ScriptedLLM, type ScriptStep } from "../src/llm/scripted.ts";
import type { LeaseStore } from "../src/store/store.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { StoreUnavailableError } from "../src/errors.ts";
import type { SessionKey, TodoStore, TranscriptStore } from "../src/store/store.ts";
import { builtinToolsFor, createBuiltinTools } from "../src/tools/builtin.ts";
import type { ToolRegistry, ToolSource, ToolSpec } from "../src/tools/registry.ts";
import { deterministicSummarizer, type Summarizer } from "../src/memory/summarizer.ts";
import type { TracedEvent } from "../src/events.ts";
import type { StoredMessage } from "../src/types.ts";

/** The store key of `sessionId` owned by `userId` ("u", the user most tests run as, unless given). */
export function keyOf(sessionId: string, userId = "u"): SessionKey {
  return { userId, sessionId };
}

/** A stored message with a fixed timestamp, for store tests. */
export function storedMessage(
  id: string,
  role: StoredMessage["role"],
  content: string | null,
  extra: Partial<StoredMessage> = {},
): StoredMessage {
  return { id, role, content, createdAt: "2026-01-01T00:00:00.000Z", ...extra } as StoredMessage;
}

export const DOCS = fileURLToPath(new URL("../data/docs", import.meta.url));

/** A fixed clock that advances one millisecond per reading, so timestamps are distinct and repeatable. */
export function steppingClock(start = Date.parse("2026-01-01T00:00:00Z")): () => Date {
  let t = start;
  return () => new Date(t++);
}

/** Sequential ids: run-1, run-2, … */
export function counterIds(prefix = "id"): () => string {
  let n = 0;
  return () => `${prefix}-${++n}`;
}

export interface Harness {
  agent: Agent;
  /** Run options that record every event into `events`, the session in `store`. */
  run: RunOptions;
  llm: ScriptedLLM;
  store: SqliteStore;
  /** Every event emitted, read loosely as a test reads the trace. */
  events: TracedEvent[];
  [Symbol.dispose](): void;
}

/** Real tools (calculator, search over data/docs, todo) plus any extra test tools and tool sources. */
export function realTools(
  store: SqliteStore,
  extra: ToolSpec[] = [],
  sources: readonly ToolSource[] = [],
): ToolRegistry {
  return createBuiltinTools(store, { docsDir: DOCS, extra, sources });
}

/** The real tools with `todo` over a request's private todos, as `HandlerDeps.requestTools` gives them. */
export function requestTools(todos: TodoStore): ToolRegistry {
  return builtinToolsFor({ docsDir: DOCS })(todos);
}

/** Turn dependencies around a scripted model and an in-memory (or given) store. */
export function harness(
  script: ScriptStep[],
  options: {
    store?: SqliteStore;
    maxSteps?: number;
    extraTools?: ToolSpec[];
    toolSources?: readonly ToolSource[];
    summarizer?: Summarizer;
    maxRawTurns?: number;
    compactBatch?: number;
    maxCtxTokens?: number;
    userMemory?: UserMemorySettings | null;
  } = {},
): Harness {
  const store = options.store ?? new SqliteStore(":memory:", { now: steppingClock() });
  const llm = new ScriptedLLM(script);
  const events: TracedEvent[] = [];
  const agent: Agent = {
    llm,
    tools: realTools(store, options.extraTools, options.toolSources),
    maxSteps: options.maxSteps ?? 8,
    summarizer: options.summarizer ?? deterministicSummarizer,
    maxRawTurns: options.maxRawTurns ?? 20,
    compactBatch: options.compactBatch,
    compactions: new BackgroundCompactions((event) => events.push(event)),
    maxCtxTokens: options.maxCtxTokens ?? 6000,
    userMemory: options.userMemory ?? null,
    now: steppingClock(),
    newId: counterIds("run"),
  };
  return {
    agent,
    run: { emit: (event) => events.push(event), store },
    llm,
    store,
    events,
    [Symbol.dispose]: () => {
      if (options.store === undefined) store.close();
    },
  };
}

/** The parsed content of the last tool message in a request. */
export function lastToolResult(
  messages: { role: string; content: string | null }[],
): Record<string, unknown> {
  const tool = messages.findLast((m) => m.role === "tool");
  if (tool === undefined) throw new Error("request has no tool message");
  return JSON.parse(tool.content ?? "null");
}

/** A temp directory removed at dispose. */
export function tempDir(): { path: string; [Symbol.dispose](): void } {
  const path = Deno.makeTempDirSync({ prefix: "mra-test-" });
  return { path, [Symbol.dispose]: () => Deno.removeSync(path, { recursive: true }) };
}

/** The repository root, where `deno task` runs. */
export const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** What a finished subprocess printed and how it ended. */
export interface ProcessResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `command args` in the repository root (or `cwd`) with `stdin` piped in and `NO_COLOR=1`, and collects
 * its output. With `clearEnv`, the child sees only `env`.
 */
export async function runProcess(
  command: string,
  args: string[],
  options: { env?: Record<string, string>; stdin?: string; clearEnv?: boolean; cwd?: string } = {},
): Promise<ProcessResult> {
  const { env = {}, stdin = "", clearEnv = false, cwd = ROOT } = options;
  const child = new Deno.Command(command, {
    args,
    cwd,
    env: { NO_COLOR: "1", ...env },
    clearEnv,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(stdin));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  return { code, stdout: new TextDecoder().decode(stdout), stderr: new TextDecoder().decode(stderr) };
}

/** A `serve` subprocess, its stderr collected as it arrives. */
export interface ServeProcess {
  child: Deno.ChildProcess;
  /** Resolves once it printed "listening on" (or its stderr ended: it failed to start). */
  listening: Promise<void>;
  /** What it printed on stderr so far. */
  stderr(): string;
  /**
   * The port of its "listening on" line: start it with `AGENT_PORT=0` so it takes a free port itself, which
   * no other process can take between asking and binding. Throws when it printed no such line.
   */
  port(): number;
  /** Sends SIGTERM (if it still runs) and resolves to its exit code once its stderr is read to the end. */
  stop(): Promise<number>;
}

/** Options of {@linkcode spawnServe}. */
export interface SpawnServeOptions {
  /**
   * The folder the child runs in (where it looks for `mcp.json`).
   * @default {ROOT}
   */
  cwd?: string;
}

/** Starts `deno <args>` (a serve command) in the repository root, or `options.cwd`, with exactly `env`. */
export function spawnServe(
  args: readonly string[],
  env: Record<string, string>,
  options: SpawnServeOptions = {},
): ServeProcess {
  const { cwd = ROOT } = options;
  const child = new Deno.Command("deno", {
    args: [...args],
    cwd,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let stderr = "";
  let onListening!: () => void;
  const listening = new Promise<void>((resolve) => (onListening = resolve));
  const drained = (async () => {
    for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) {
      stderr += text;
      if (stderr.includes("listening on")) onListening();
    }
    onListening();
  })();
  return {
    child,
    listening,
    stderr: () => stderr,
    port: () => {
      const listening = stderr.match(/listening on http:\/\/[^\s]*:(\d+)/);
      if (listening === null) {
        throw new Error(`Cannot read the port of serve: it printed no "listening on" line: ${stderr}`);
      }
      return Number(listening[1]);
    },
    stop: async () => {
      try {
        child.kill("SIGTERM");
      } catch {
        // Already exited (it failed to start): its status says why.
      }
      const { code } = await child.status;
      await drained;
      return code;
    },
  };
}

/**
 * The environment of a `deno task` child: PATH, HOME and DENO_DIR from this process, the database at
 * `<dir>/db/sessions.db`, the trace at `<dir>/trace/traces.jsonl`, the input history at `<dir>/db/chat_history`,
 * then `extra`. A variable with an empty value is left out.
 */
export function childEnv(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "",
    HOME: Deno.env.get("HOME") ?? dir,
    DENO_DIR: Deno.env.get("DENO_DIR") ?? "",
    AGENT_DB_PATH: `${dir}/db/sessions.db`,
    AGENT_TRACE_PATH: `${dir}/trace/traces.jsonl`,
    AGENT_HISTORY_PATH: `${dir}/db/chat_history`,
    ...extra,
  };
  return Object.fromEntries(Object.entries(env).filter(([, value]) => value !== ""));
}

/** `deno` arguments that run `serve` with broad permissions, for tests that are not about the permissions. */
export const SERVE_ARGS: readonly string[] = [
  "run",
  "--no-prompt",
  "--allow-env",
  "--allow-read",
  "--allow-write",
  "--allow-net",
  "src/main.ts",
  "serve",
];

/** A stream to hand where output goes (the REPL's), collecting what is written to it as text. */
export function textSink(): { stream: PassThrough; text(): string } {
  const stream = new PassThrough();
  let text = "";
  stream.on("data", (chunk: Uint8Array | string) => {
    text += typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk);
  });
  return { stream, text: () => text };
}

/**
 * Makes `store`'s second append fail as an unreachable database does: the question is stored, the step after
 * the model's reply finds the database gone (outcome `error`, failure kind `store`).
 */
export function failSecondAppend(store: Pick<TranscriptStore, "append">): void {
  const append = store.append.bind(store);
  let appends = 0;
  store.append = (key, messages, ...rest) =>
    ++appends === 2
      ? Promise.reject(new StoreUnavailableError("the session database sqlite:test is unavailable"))
      : append(key, messages, ...rest);
}

/** `store`'s lease methods with some replaced: a store that loses leases, fails renewals or counts calls. */
export function leaseStoreWith(store: LeaseStore, overrides: Partial<LeaseStore>): LeaseStore {
  return {
    acquireLease: (...args) => store.acquireLease(...args),
    renewLease: (...args) => store.renewLease(...args),
    releaseLease: (...args) => store.releaseLease(...args),
    cancelLease: (...args) => store.cancelLease(...args),
    ...overrides,
  };
}

/**
 * Makes `h`'s agent write through a store whose write of a tool result fails while `on`: the turn stops after a
 * tool's effect with its call stored and no result, exactly what a process killed there leaves.
 */
export function stopAfterEffects(h: Harness): { on: boolean } {
  const failing = { on: true };
  const store = h.store;
  h.run.store = new Proxy(store, {
    get(target, property) {
      if (property === "append") {
        return (key: SessionKey, messages: readonly StoredMessage[]) =>
          failing.on && messages.some((m) => m.role === "tool")
            ? Promise.reject(new StoreUnavailableError("the process stopped"))
            : store.append(key, messages);
      }
      const value = Reflect.get(target, property);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return failing;
}
