/**
 * The entry point: parses the command line, builds the real dependencies (fetch client, session store, trace
 * file, clock) and dispatches to a subcommand. The only module that touches the process.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { main as demoMain } from "./demo/demo.ts";
import { type ChatOptions, oneShotMessage, runChat } from "./cli/chat.ts";
import { colorWanted } from "./cli/render.ts";
import { FileHistory } from "./cli/history.ts";
import { helpText } from "./cli/help.ts";
import { type Config, isLoopbackHost, loadConfig, requireApiKey } from "./config.ts";
import { ConfigError, errorMessage, SessionError } from "./errors.ts";
import { Authenticator } from "./http/auth.ts";
import { BatchedLog, writeStderr } from "./http/batched_log.ts";
import { REQUEST_LINE } from "./http/handler.ts";
import { serveHttp } from "./http/server.ts";
import { listenFailure } from "./http/listen_failure.ts";
import { SessionQueue } from "./http/session_queue.ts";
import { createLlmFromConfig } from "./llm/openai.ts";
import type { Agent } from "./agent/loop.ts";
import { BackgroundCompactions } from "./agent/background.ts";
import { listenNetHost, missingPermissions, readEnvironment, TERMINAL_VARIABLES } from "./permissions.ts";
import { SqliteStore } from "./store/sqlite.ts";
import { SessionLeases } from "./store/session_leases.ts";
import { openSessionStore, sharedTraceOf } from "./store/open.ts";
import { enableTelemetry, TELEMETRY_VARIABLES } from "./telemetry.ts";
import { type SessionKey, type SessionStore, validateId } from "./store/store.ts";
import { createLlmSummarizer } from "./memory/summarizer.ts";
import { builtinToolsFor } from "./tools/builtin.ts";
import type { ToolRegistry } from "./tools/registry.ts";
import { JsonlTracer } from "./trace/trace.ts";
import type { McpTools } from "./mcp/mcp_tools.ts";
import { openToolConfig } from "./mcp/start.ts";
import { type TracePages, TraceReader } from "./trace/reader.ts";

/** Turns a session may have waiting behind the running one before the server answers 429. */
const MAX_QUEUED_TURNS = 8;

function fail(message: string): never {
  console.error(message);
  Deno.exit(2);
}

/** The real dependencies of a turn, on the configured database, trace file and provider. */
interface Runtime {
  store: SessionStore;
  tracer: JsonlTracer;
  /** Where the trace route reads: the file index, or the database's table every replica writes. */
  traceReader: TracePages;
  agent: Agent;
  /** The agent's tools bound to another store (a request's private one). */
  toolsFor(store: SessionStore): ToolRegistry;
  /** The MCP servers started from AGENT_MCP_CONFIG, if any. */
  mcp: McpTools | null;
  /** The session leases every turn, delete and compaction on the database runs under. */
  leases: SessionLeases;
  /** Waits for background compactions (abandoning them after the shutdown grace), then closes the files. */
  close(): Promise<void>;
}

/** Runs `open`, or fails with one line: what could not be done to `path`, why, and what to do. */
function opening<T>(variable: string, action: string, path: string, open: () => T): T {
  try {
    return open();
  } catch (error) {
    const advice = `make it and its folder writable, or set ${variable} to another file`;
    throw new ConfigError(variable, `Cannot ${action} ${path}: ${errorMessage(error)}; ${advice}`);
  }
}

/** Fails with a `ConfigError` naming the file unless the trace can be appended to (created if new). */
function requireWritableTrace(tracePath: string): void {
  const path = resolve(tracePath);
  opening("AGENT_TRACE_PATH", "write the trace file", path, () => {
    mkdirSync(dirname(path), { recursive: true });
    Deno.openSync(path, { append: true, create: true }).close();
  });
}

/**
 * Opens everything a command works on, before any input is read: a database or trace that cannot be
 * written is one line and exit code 2 here, never a failure in the middle of the first turn.
 */
async function openRuntime(config: Readonly<Config>): Promise<Runtime> {
  let store: SessionStore;
  let tools: Awaited<ReturnType<typeof openToolConfig>>;
  try {
    requireWritableTrace(config.tracePath);
    store = await openSessionStore(config);
    tools = await openToolConfig(config, (line) => console.error(line));
  } catch (error) {
    if (error instanceof ConfigError) fail(error.message);
    throw error;
  }
  // The server's trace route pages through this index; the lines this process writes go straight into it.
  const traceReader = new TraceReader(config.tracePath);
  const shared = sharedTraceOf(store);
  const tracer = new JsonlTracer(config.tracePath, {
    maxPayloadChars: config.traceMaxPayloadChars,
    maxBytes: config.traceMaxBytes,
    secrets: [config.apiKey, ...config.apiTokens.map((t) => t.token)],
    onAppend: (line) => (traceReader.noteAppend(line), shared?.add(line.event)),
  });
  const llm = createLlmFromConfig(config, { stream: config.stream });
  const { mcp, approval } = tools;
  const toolsFor = builtinToolsFor({ sources: mcp ? [mcp] : [] });
  const leases = new SessionLeases(store, { ttlMs: config.sessionLeaseSeconds * 1000 });
  const compactions = new BackgroundCompactions((event) => tracer.write(event), { leases });
  return {
    store,
    tracer,
    traceReader: shared ?? traceReader,
    toolsFor,
    mcp,
    leases,
    agent: {
      store,
      llm,
      tools: toolsFor(store),
      maxSteps: config.maxToolIters,
      maxToolCallsPerStep: config.maxToolCallsPerStep,
      summarizer: createLlmSummarizer(llm),
      maxRawTurns: config.maxRawTurns,
      compactBatch: config.compactBatch,
      compactions,
      maxCtxTokens: config.maxCtxTokens,
      approval,
    },
    close: async () => {
      if (compactions.running > 0) {
        const grace = `${config.shutdownGraceSeconds}s (AGENT_SHUTDOWN_GRACE_SECONDS)`;
        console.error(`finishing ${compactions.running} background compaction(s), up to ${grace}`);
      }
      await compactions.close(config.shutdownGraceSeconds * 1000);
      await mcp?.close();
      tracer.close();
      await shared?.close();
      await store.close();
    },
  };
}

/** What chat's command line and terminal decide: the one-shot message (`-`: stdin), the mode, colour, width. */
type ChatChoices = Pick<ChatOptions, "message" | "color" | "columns" | "interactive">;

async function chatOptions(words: string[], noColorFlag: boolean): Promise<ChatChoices> {
  const piped = words.includes("-") ? await new Response(Deno.stdin.readable).text() : "";
  const message = words.length > 0 ? oneShotMessage(words, piped) : undefined;
  if (message === "") fail("Nothing to send: stdin was empty and no question was given.");
  const env = readEnvironment(TERMINAL_VARIABLES);
  const isTerminal = Deno.stdout.isTerminal();
  const columns = isTerminal ? Deno.consoleSize().columns : undefined;
  // A dumb terminal (Emacs' shell) cannot follow the line editor's cursor moves: it gets the line mode.
  const interactive = message === undefined && Deno.stdin.isTerminal() && env.TERM !== "dumb";
  return { message, interactive, columns, color: colorWanted({ isTerminal, noColorFlag, env }) };
}

async function chat(config: Readonly<Config>, key: SessionKey, options: ChatChoices) {
  const runtime = await openRuntime(config);
  const { interactive } = options;
  const onError = (error: unknown) =>
    console.error(
      `Cannot save the input history to ${config.historyPath}: ${
        errorMessage(error)
      }; set AGENT_HISTORY_PATH`,
    );
  try {
    await runtime.store.getOrCreate(key);
    return await runChat({
      ...key,
      ...options,
      deps: runtime.agent,
      emit: (event) => runtime.tracer.write(event),
      input: process.stdin,
      output: process.stdout,
      status: process.stderr,
      interactive,
      leases: runtime.leases,
      history: interactive ? new FileHistory(resolve(config.historyPath), { onError }) : undefined,
      model: config.model,
      setModel: (model) => {
        const llm = createLlmFromConfig({ ...config, model }, { stream: config.stream });
        runtime.agent.llm = llm;
        runtime.agent.summarizer = createLlmSummarizer(llm);
      },
    });
  } finally {
    await runtime.close();
  }
}

/** Starts the server, or exits with one line naming the address and what to do when it cannot listen. */
function listen<T>(start: () => T, config: Readonly<Config>): T {
  try {
    return start();
  } catch (error) {
    fail(
      `Cannot listen on ${listenNetHost(config)} (AGENT_HOST, AGENT_PORT): ${listenFailure(error, config)}`,
    );
  }
}

async function serve(config: Readonly<Config>): Promise<number> {
  const runtime = await openRuntime(config);
  // Request lines go out in batches, any other line (errors, shutdown) at once; all before "stopped".
  const log = new BatchedLog(writeStderr);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    const server = listen(() =>
      serveHttp({
        agent: runtime.agent,
        openEphemeral: () => {
          const store = new SqliteStore(":memory:");
          return { store, tools: runtime.toolsFor(store) };
        },
        emit: (event) => runtime.tracer.write(event),
        authenticator: new Authenticator(config.apiTokens),
        queue: new SessionQueue({ maxWaiting: MAX_QUEUED_TURNS }),
        leases: runtime.leases,
        maxBodyBytes: config.maxBodyBytes,
        tracePath: config.tracePath,
        traceReader: runtime.traceReader,
        model: config.model,
        mcpHealth: runtime.mcp ? () => runtime.mcp!.health() : undefined,
        log: (line) => log.line(line, !REQUEST_LINE.test(line)),
      }, {
        hostname: config.host,
        port: config.port,
        stop: stop.signal,
        graceSeconds: config.shutdownGraceSeconds,
        onListen: ({ hostname, port }) => {
          const auth = config.apiTokens.length > 0 ? `${config.apiTokens.length} API token(s)` : "no auth";
          console.error(`listening on http://${hostname}:${port} (${auth}, model ${config.model})`);
        },
      }), config);
    // Index the trace files already on disk now, in async chunks, so the first trace request does not wait
    // for it; a failure here is the route's to report.
    if (runtime.traceReader instanceof TraceReader) runtime.traceReader.refresh().catch(() => {});
    await server.finished;
    log.close();
    console.error("stopped");
    return 0;
  } finally {
    log.close();
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await runtime.close();
  }
}

function loadChecked(check: (config: Readonly<Config>) => void): Readonly<Config> {
  try {
    const config = loadConfig(readEnvironment());
    requireApiKey(config);
    check(config);
    return config;
  } catch (error) {
    if (error instanceof ConfigError || error instanceof SessionError) fail(error.message);
    throw error;
  }
}

function requirePermissions(config: Readonly<Config>, command: "chat" | "serve"): void {
  const missing = missingPermissions(config, { listen: command === "serve", history: command === "chat" });
  if (missing.length > 0) {
    fail(`Cannot start: missing permission ${missing.join(" ")} (deno task ${command} grants exactly these)`);
  }
}

/** Runs the program with `args` and resolves to its exit code. */
export async function main(args: string[]): Promise<number> {
  const telemetryProblem = await enableTelemetry(readEnvironment(TELEMETRY_VARIABLES));
  if (telemetryProblem !== null) console.error(telemetryProblem);
  if (args[0] === "demo") return await demoMain(args.slice(1));
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        session: { type: "string", default: "default" },
        user: { type: "string", default: "local" },
        "no-color": { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (error) {
    fail(`${(error as Error).message}\nRun with --help for usage.`);
  }
  const [command, ...rest] = parsed.positionals;
  if (parsed.values.help || command === "help") {
    console.log(helpText());
    return 0;
  }
  if (command === undefined) fail(`Missing command.\n\n${helpText()}`);
  if (command === "chat") {
    const { session, user } = parsed.values;
    const config = loadChecked(() => {
      validateId(session);
      validateId(user, "user id");
    });
    requirePermissions(config, "chat");
    const options = await chatOptions(rest, parsed.values["no-color"]);
    return await chat(config, { sessionId: session, userId: user }, options);
  }
  if (rest.length > 0) fail(`Unexpected argument "${rest[0]}". Run with --help for usage.`);
  if (command === "serve") {
    const config = loadChecked((config) => {
      if (config.apiTokens.length === 0 && !isLoopbackHost(config.host)) {
        throw new ConfigError(
          "AGENT_API_TOKENS",
          `Refusing to serve on ${config.host} without AGENT_API_TOKENS: ` +
            "without tokens the server binds to loopback only (set AGENT_HOST=127.0.0.1, or set tokens)",
        );
      }
    });
    requirePermissions(config, "serve");
    return await serve(config);
  }
  fail(`Unknown command "${command}"; available: chat, serve, demo. Run with --help for usage.`);
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
