/**
 * The real dependencies of a command, built from the configuration: the session store, the trace file and
 * its reader, the provider, the tools (MCP included), the session runner (queue and leases), the background
 * compactions and the retention passes; and the order in which they are closed.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import type { Config } from "./config.ts";
import { ConfigError, errorMessage } from "./errors.ts";
import { createLlmFromConfig } from "./llm/client.ts";
import type { Agent } from "./agent/loop.ts";
import { BackgroundCompactions } from "./session/background.ts";
import { useTokenizer } from "./memory/plan.ts";
import { loadTokenizer, type TextCounter } from "./memory/tokenizer.ts";
import type { TokenizerName } from "./types.ts";
import { SessionLeases } from "./session/leases.ts";
import { SessionRunner } from "./session/runner.ts";
import { ProcessMarks } from "./session/process_marks.ts";
import { openSessionStore, retentionOf, sharedTraceOf } from "./store/open.ts";
import { processOwner, type SessionStore, type TodoStore } from "./store/store.ts";
import { createLlmSummarizer, type Summarizer } from "./memory/summarizer.ts";
import type { LLM } from "./llm/llm.ts";
import { builtinToolsFor } from "./tools/builtin.ts";
import type { ToolRegistry } from "./tools/registry.ts";
import { writeStderr } from "./http/batched_log.ts";
import { JsonlTracer } from "./trace/trace.ts";
import type { McpTools } from "./mcp/mcp_tools.ts";
import { openToolConfig } from "./mcp/start.ts";
import type { TracePages } from "./trace/shared_trace.ts";

/** Turns a session may have waiting behind the running one before the server answers 429. */
const MAX_QUEUED_TURNS = 8;

/** The real dependencies of a turn, on the configured database, trace file and provider. */
export interface Runtime {
  store: SessionStore;
  tracer: JsonlTracer;
  /** Where the trace route reads: the database's trace table, which every process on it writes. */
  trace: TracePages | undefined;
  agent: Agent;
  /** The agent's tools with `todo` over other todos (a request's private ones). */
  toolsFor(todos: TodoStore): ToolRegistry;
  /** The MCP servers started from AGENT_MCP_CONFIG, if any. */
  mcp: McpTools | null;
  /** Runs every turn, delete and compaction on the database: in the session's queue, under its lease. */
  sessions: SessionRunner;
  /**
   * Stops the retention passes (one under way ends after its batch), waits for background compactions
   * (abandoning them after the shutdown grace), then closes the files.
   */
  close(): Promise<void>;
}

/** Fails with a `ConfigError` naming the file, why and what to do, unless the trace can be appended to. */
function requireWritableTrace(tracePath: string): void {
  const path = resolve(tracePath);
  try {
    mkdirSync(dirname(path), { recursive: true });
    Deno.openSync(path, { append: true, create: true }).close();
  } catch (error) {
    const advice = "make it and its folder writable, or set AGENT_TRACE_PATH to another file";
    throw new ConfigError(
      "AGENT_TRACE_PATH",
      `Cannot write the trace file ${path}: ${errorMessage(error)}; ${advice}`,
    );
  }
}

/** The exact tokenizer AGENT_TOKENIZER names, or a `ConfigError` saying why it cannot be loaded. */
async function openTokenizer(name: TokenizerName): Promise<TextCounter> {
  try {
    return await loadTokenizer(name);
  } catch (error) {
    throw new ConfigError(
      "AGENT_TOKENIZER",
      `Cannot load the tokenizer of AGENT_TOKENIZER=${name} (npm:js-tiktoken): ${
        errorMessage(error).split("\n")[0]
      }; unset AGENT_TOKENIZER to estimate tokens without it`,
    );
  }
}

/** Options of {@linkcode openRuntime}. */
export interface OpenRuntimeOptions {
  /** The model the turns use. @default {the configured provider's client} */
  llm?: LLM;
  /** The compaction summarizer. @default {createLlmSummarizer(llm)} */
  summarizer?: Summarizer;
}

/**
 * Opens everything a command works on, before any input is read. Rejects with a `ConfigError` (one line:
 * what could not be opened and what to do) when the trace, the database or the tool configuration cannot be
 * opened, so that is never a failure in the middle of the first turn.
 */
export async function openRuntime(
  config: Readonly<Config>,
  options: OpenRuntimeOptions = {},
): Promise<Runtime> {
  requireWritableTrace(config.tracePath);
  if (config.tokenizer !== "") useTokenizer(await openTokenizer(config.tokenizer));
  const store = await openSessionStore(config);
  const { mcp, approval } = await openToolConfig(config, (line) => console.warn(line));
  // The events this process writes go on to the database's trace table, where the trace route reads them.
  const shared = sharedTraceOf(store, config.traceTableMaxEvents);
  const tracer = new JsonlTracer(config.tracePath, {
    maxPayloadChars: config.traceMaxPayloadChars,
    maxBytes: config.traceMaxBytes,
    secrets: [config.apiKey, ...config.apiTokens.map((t) => t.token)],
    onAppend: shared === null ? undefined : (event, line) => shared.add(event, line),
  });
  const { llm = createLlmFromConfig(config, { stream: config.stream }) } = options;
  const { summarizer = createLlmSummarizer(llm) } = options;
  const memoryItems = config.userMemory ? config.userMemoryItems : null;
  // A request's private store (the OpenAI-compatible route) is dropped after it: memory stays in this one.
  const toolsFor = builtinToolsFor({ sources: mcp ? [mcp] : [], memoryItems, memoryStore: store });
  // Processes of one host sharing the database's folder (with PostgreSQL: the trace's) learn from these marks
  // that a lease's holder crashed, and take its leases at once instead of after they expire.
  const owner = processOwner();
  const marks = new ProcessMarks(
    dirname(resolve(config.databaseUrl === "" ? config.dbPath : config.tracePath)),
  );
  marks.mark(owner);
  const leases = new SessionLeases(store, {
    ttlMs: config.sessionLeaseSeconds * 1000,
    owner,
    processGone: (other) => marks.isGone(other),
  });
  const sessions = new SessionRunner({ leases, queue: { maxWaiting: MAX_QUEUED_TURNS } });
  // Old trace events and idle sessions go in the background; `:0` is an owner this process's leases never use.
  const retention = retentionOf(store, {
    traceDays: config.traceRetentionDays,
    sessionDays: config.sessionRetentionDays,
    owner: `${owner}:0`,
    leaseTtlMs: config.sessionLeaseSeconds * 1000,
  });
  retention?.start();
  const compactions = new BackgroundCompactions((event) => tracer.write(event), { sessions });
  return {
    store,
    tracer,
    trace: shared ?? undefined,
    toolsFor,
    mcp,
    sessions,
    agent: {
      llm,
      tools: toolsFor(store),
      maxSteps: config.maxToolIters,
      maxToolCallsPerStep: config.maxToolCallsPerStep,
      summarizer,
      maxRawTurns: config.maxRawTurns,
      compactBatch: config.compactBatch,
      compactions,
      maxCtxTokens: config.maxCtxTokens,
      userMemory: config.userMemory
        ? { items: config.userMemoryItems, recall: config.userMemoryRecall }
        : null,
      approval,
      responseFormatMode: config.responseFormatMode,
      maxTurnTokens: config.maxTurnTokens,
      turnTimeoutSeconds: config.turnTimeoutSeconds,
      prices: config.prices,
    },
    close: async () => {
      // Stopped first: a pass under way ends after its current batch, long before the grace below.
      const retained = retention?.close();
      if (compactions.running > 0) {
        const grace = `${config.shutdownGraceSeconds}s (AGENT_SHUTDOWN_GRACE_SECONDS)`;
        writeStderr(`finishing ${compactions.running} background compaction(s), up to ${grace}\n`);
      }
      await compactions.close(config.shutdownGraceSeconds * 1000);
      await mcp?.close();
      tracer.close();
      await retained;
      await shared?.close();
      await store.close();
      marks.close();
    },
  };
}
