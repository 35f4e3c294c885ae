/**
 * The entry point: parses the command line, builds the real dependencies (fetch client, SQLite file, trace
 * file, clock) and dispatches to a subcommand. The only module that touches the process.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { main as demoMain } from "../scripts/acceptance_demo.ts";
import { runChat } from "./cli/chat.ts";
import { type Config, isLoopbackHost, loadConfig, requireApiKey, SETTINGS } from "./config.ts";
import { ConfigError, SessionError } from "./errors.ts";
import { Authenticator } from "./http/auth.ts";
import { BatchedLog, writeStderr } from "./http/batched_log.ts";
import { REQUEST_LINE } from "./http/handler.ts";
import { serveHttp } from "./http/server.ts";
import { SessionQueue } from "./http/session_queue.ts";
import { createLlmFromConfig } from "./llm/openai.ts";
import type { TurnDeps } from "./loop.ts";
import { missingPermissions, readEnvironment } from "./permissions.ts";
import { SessionStore, validateId } from "./store.ts";
import { createLlmSummarizer } from "./summarizer.ts";
import { createBuiltinTools } from "./tools/builtin.ts";
import { JsonlTracer } from "./trace.ts";

/** Turns a session may have waiting behind the running one before the server answers 429. */
const MAX_QUEUED_TURNS = 8;

function helpText(): string {
  const width = Math.max(...Object.keys(SETTINGS).map((name) => name.length));
  const variables = Object.entries(SETTINGS)
    .map(([name, s]) => `  ${name.padEnd(width)}  ${s.meaning}${s.default ? ` (default ${s.default})` : ""}`)
    .join("\n");
  return `mini-runtime-agent: a minimal, deterministic agent runtime.

Usage:
  deno task chat [--session ID] [--user ID]
  deno task serve
  deno task demo [--live] [--keep]

Commands:
  chat        talk to the agent: a REPL on a terminal, one turn per line when stdin is piped
              (e.g. printf 'what is 12*(3+4)?\\n' | deno task chat)
  serve       the HTTP API on AGENT_HOST:AGENT_PORT (routes: GET /openapi.json)
  demo        the four-phase acceptance demo (offline unless --live)

Options:
  --session ID   chat: session to use (default "default"); 1-128 characters of A-Z a-z 0-9 . _ : -
  --user ID      chat: user who owns the session (default "local")
  -h, --help     show this help

Environment variables (.env is not read; use deno task --env-file=.env ... to load one):
${variables}

Exit codes: 0 done; 1 a piped turn ended in error; 2 bad usage, configuration or permissions.`;
}

function fail(message: string): never {
  console.error(message);
  Deno.exit(2);
}

/** The real dependencies of a turn, on the configured database, trace file and provider. */
interface Runtime {
  store: SessionStore;
  tracer: JsonlTracer;
  turn: Omit<TurnDeps, "emit" | "signal">;
  close(): void;
}

function openRuntime(config: Readonly<Config>): Runtime {
  mkdirSync(dirname(config.dbPath), { recursive: true });
  const store = new SessionStore(config.dbPath);
  const tracer = new JsonlTracer(config.tracePath, {
    maxPayloadChars: config.traceMaxPayloadChars,
    secrets: [config.apiKey, ...config.apiTokens.map((t) => t.token)],
  });
  const llm = createLlmFromConfig(config, { stream: config.stream });
  return {
    store,
    tracer,
    turn: {
      store,
      llm,
      tools: createBuiltinTools(store),
      maxSteps: config.maxToolIters,
      summarizer: createLlmSummarizer(llm),
      maxRawTurns: config.maxRawTurns,
      maxCtxTokens: config.maxCtxTokens,
    },
    close: () => {
      tracer.close();
      store.close();
    },
  };
}

async function chat(config: Readonly<Config>, sessionId: string, userId: string): Promise<number> {
  const runtime = openRuntime(config);
  try {
    runtime.store.getOrCreate({ userId, sessionId });
    return await runChat({
      sessionId,
      userId,
      deps: runtime.turn,
      emit: (event) => runtime.tracer.write(event),
      input: process.stdin,
      output: process.stdout,
      status: process.stderr,
      interactive: Deno.stdin.isTerminal(),
    });
  } finally {
    runtime.close();
  }
}

async function serve(config: Readonly<Config>): Promise<number> {
  const runtime = openRuntime(config);
  // Request lines go out in batches, any other line (errors, shutdown) at once; all before "stopped".
  const log = new BatchedLog(writeStderr);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    const server = serveHttp({
      store: runtime.store,
      turn: runtime.turn,
      emit: (event) => runtime.tracer.write(event),
      authenticator: new Authenticator(config.apiTokens),
      queue: new SessionQueue({ maxWaiting: MAX_QUEUED_TURNS }),
      maxBodyBytes: config.maxBodyBytes,
      tracePath: config.tracePath,
      model: config.model,
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
    });
    await server.finished;
    log.close();
    console.error("stopped");
    return 0;
  } finally {
    log.close();
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    runtime.close();
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
  const missing = missingPermissions(config, { listen: command === "serve" });
  if (missing.length > 0) {
    fail(`Cannot start: missing permission ${missing.join(" ")} (deno task ${command} grants exactly these)`);
  }
}

/** Runs the program with `args` and resolves to its exit code. */
export async function main(args: string[]): Promise<number> {
  if (args[0] === "demo") return await demoMain(args.slice(1));
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        session: { type: "string", default: "default" },
        user: { type: "string", default: "local" },
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
  if (rest.length > 0) fail(`Unexpected argument "${rest[0]}". Run with --help for usage.`);
  if (command === "chat") {
    const { session, user } = parsed.values;
    const config = loadChecked(() => {
      validateId(session);
      validateId(user, "user id");
    });
    requirePermissions(config, "chat");
    return await chat(config, session, user);
  }
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
