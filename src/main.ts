/**
 * The entry point: parses the command line, opens the real dependencies (built in `runtime.ts`) and
 * dispatches to a subcommand. The only module that handles the process's arguments, signals and exit code.
 * @module
 */
import { resolve } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { main as demoMain } from "./demo/demo.ts";
import { type ChatOptions, oneShotMessage, runChat, schemaFormat } from "./cli/chat.ts";
import { colorWanted } from "./cli/render.ts";
import { FileHistory } from "./cli/history.ts";
import { helpText } from "./cli/help.ts";
import { COMMAND_LINE_OPTIONS } from "./cli/command_line.ts";
import { type Config, isLoopbackHost, loadConfig, readEnvironment, requireApiKey } from "./config.ts";
import { ConfigError, errorMessage, SessionError } from "./errors.ts";
import { Authenticator } from "./http/auth.ts";
import { BatchedLog, writeStderr } from "./http/batched_log.ts";
import { REQUEST_LINE } from "./http/handler.ts";
import { serveHttp } from "./http/server.ts";
import { listenFailure } from "./http/listen_failure.ts";
import { McpEndpoint } from "./mcp/http_endpoint.ts";
import { serveMcpStdio } from "./mcp/stdio_endpoint.ts";
import { createLlmFromConfig } from "./llm/client.ts";
import { ENV_VARIABLES, listenNetHost, missingPermissions, TERMINAL_VARIABLES } from "./permissions.ts";
import { openRuntime, type OpenRuntimeOptions, type Runtime } from "./runtime.ts";
import { DEMO_MODEL_NAME, DemoModel } from "./demo/model.ts";
import { probeProvider } from "./llm/probe.ts";
import { freshSessionId, lastSessionPath, readLastSession, rememberLastSession } from "./cli/last_session.ts";
import { enableTelemetry, TELEMETRY_VARIABLES } from "./telemetry.ts";
import { type SessionKey, validateId } from "./store/store.ts";
import { createLlmSummarizer, deterministicSummarizer } from "./memory/summarizer.ts";

/** How long the REPL waits at start-up for the provider's `GET /models`. */
const PROBE_TIMEOUT_MS = 2000;

function fail(message: string): never {
  console.error(message);
  Deno.exit(2);
}

/** The runtime, or exit code 2 with one line when its trace, database or tool configuration cannot be opened. */
async function openOrFail(config: Readonly<Config>, options: OpenRuntimeOptions = {}): Promise<Runtime> {
  try {
    return await openRuntime(config, options);
  } catch (error) {
    if (error instanceof ConfigError) fail(error.message);
    throw error;
  }
}

/**
 * What chat's command line and terminal decide: the one-shot message (`-`: stdin), the mode, colour, width,
 * and the response format of `--schema`.
 */
type ChatChoices = Pick<ChatOptions, "message" | "color" | "columns" | "interactive" | "responseFormat"> & {
  /** A one-shot, or input not from a terminal: a run of its own, in a fresh session unless one is named. */
  oneRun: boolean;
};

/** The `--schema` file (`-`: stdin) as a response format, or exit code 2 saying why it cannot be used. */
async function readSchema(source: string): Promise<ChatOptions["responseFormat"]> {
  let text: string;
  try {
    text = source === "-" ? await new Response(Deno.stdin.readable).text() : await Deno.readTextFile(source);
  } catch (error) {
    const denied = error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied;
    const hint = denied
      ? "; run it through deno task chat, which grants the file it names, or pass it on stdin with " +
        "--schema - < FILE"
      : "";
    fail(`Cannot read --schema ${source}: ${errorMessage(error)}${hint}`);
  }
  try {
    return schemaFormat(text, source);
  } catch (error) {
    fail((error as TypeError).message);
  }
}

async function chatOptions(words: string[], noColorFlag: boolean, schema?: string): Promise<ChatChoices> {
  if (schema === "-" && words.includes("-")) {
    fail("Cannot read both --schema - and the message - from stdin: give one of them as a file or words.");
  }
  const responseFormat = schema === undefined ? null : await readSchema(schema);
  const piped = words.includes("-") ? await new Response(Deno.stdin.readable).text() : "";
  const message = words.length > 0 ? oneShotMessage(words, piped) : undefined;
  if (message === "") fail("Nothing to send: stdin was empty and no question was given.");
  const env = readEnvironment(TERMINAL_VARIABLES);
  const isTerminal = Deno.stdout.isTerminal();
  const columns = isTerminal ? Deno.consoleSize().columns : undefined;
  // A dumb terminal (Emacs' shell) cannot follow the line editor's cursor moves: it gets the line mode.
  const interactive = message === undefined && Deno.stdin.isTerminal() && env.TERM !== "dumb";
  const color = colorWanted({ isTerminal, noColorFlag, env });
  const oneRun = message !== undefined || !Deno.stdin.isTerminal();
  return { message, interactive, columns, color, responseFormat, oneRun };
}

/** How chat's command line names its session. */
interface SessionChoice {
  session?: string;
  continue: boolean;
  user: string;
}

/**
 * The session a chat run uses: `--session`'s; with `-c` the last one-shot or piped run's; else a fresh one for
 * a one-shot or piped run, and "default" for the REPL. A one-shot or piped run's is remembered for `-c`.
 */
function chatSession(config: Readonly<Config>, choice: SessionChoice, oneRun: boolean): string {
  const path = lastSessionPath(resolve(config.historyPath));
  let sessionId: string;
  if (choice.continue) {
    let last: string | null = null;
    try {
      last = readLastSession(path, choice.user);
    } catch (error) {
      fail(`${errorMessage(error)}; delete it, or give --session ID`);
    }
    if (last === null) {
      fail(`Nothing to continue: no one-shot or piped chat of user ${choice.user} yet; give --session ID`);
    }
    sessionId = last;
  } else {
    sessionId = choice.session ?? (oneRun ? freshSessionId() : "default");
  }
  if (oneRun) {
    const problem = rememberLastSession(path, choice.user, sessionId);
    if (problem !== null) console.warn(problem);
  }
  return sessionId;
}

/** The demo model's line on stderr: what answers is rules, not an LLM. */
const DEMO_NOTICE = `demo model (${DEMO_MODEL_NAME}): offline rules, not an LLM; ask it "what can you do?"`;

async function chat(config: Readonly<Config>, key: SessionKey, options: ChatChoices, demo: boolean) {
  const runtime = await openOrFail(
    config,
    demo ? { llm: new DemoModel(), summarizer: deterministicSummarizer } : {},
  );
  const { interactive } = options;
  const onError = (error: unknown) =>
    console.warn(
      `Cannot save the input history to ${config.historyPath}: ${
        errorMessage(error)
      }; set AGENT_HISTORY_PATH`,
    );
  try {
    await runtime.store.getOrCreate(key);
    if (demo) writeStderr(`${DEMO_NOTICE}\n`);
    // A wrong URL or key is said before the first question; a one-shot learns it as fast from its one turn.
    const problem = interactive && !demo
      ? await probeProvider(config.baseUrl, {
        apiKey: config.apiKey,
        api: config.api,
        timeoutMs: PROBE_TIMEOUT_MS,
      })
      : null;
    if (problem !== null) console.warn(`model not reachable: ${problem} (the chat starts anyway)`);
    return await runChat({
      ...key,
      ...options,
      deps: runtime.agent,
      store: runtime.store,
      emit: (event) => runtime.tracer.write(event),
      input: process.stdin,
      output: process.stdout,
      status: process.stderr,
      sessions: runtime.sessions,
      history: interactive ? new FileHistory(resolve(config.historyPath), { onError }) : undefined,
      model: demo ? DEMO_MODEL_NAME : config.model,
      ...(demo ? {} : {
        setModel: (model: string) => {
          const llm = createLlmFromConfig({ ...config, model }, { stream: config.stream });
          runtime.agent.llm = llm;
          runtime.agent.summarizer = createLlmSummarizer(llm);
        },
      }),
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
  const runtime = await openOrFail(config);
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
        store: runtime.store,
        requestTools: (todos) => runtime.toolsFor(todos),
        emit: (event) => runtime.tracer.write(event),
        authenticator: new Authenticator(config.apiTokens),
        hosts: { allowed: config.allowedHosts },
        sessions: runtime.sessions,
        maxBodyBytes: config.maxBodyBytes,
        dailyTokens: config.userDailyTokens,
        trace: runtime.trace,
        model: config.model,
        mcpHealth: runtime.mcp ? () => runtime.mcp!.health() : undefined,
        mcp: config.serveMcp ? new McpEndpoint() : undefined,
        log: (line) => log.line(line, !REQUEST_LINE.test(line)),
      }, {
        hostname: config.host,
        port: config.port,
        stop: stop.signal,
        graceSeconds: config.shutdownGraceSeconds,
        onListen: ({ hostname, port }) => {
          const auth = config.apiTokens.length > 0 ? `${config.apiTokens.length} API token(s)` : "no auth";
          const mcp = config.serveMcp ? ", MCP at /mcp" : "";
          writeStderr(`listening on http://${hostname}:${port} (${auth}, model ${config.model}${mcp})\n`);
        },
      }), config);
    await server.finished;
    log.close();
    writeStderr("stopped\n");
    return 0;
  } finally {
    log.close();
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await runtime.close();
  }
}

/** `deno task mcp`: the agent's MCP server on stdin/stdout as `userId`, until the client closes stdin. */
async function mcp(config: Readonly<Config>, userId: string): Promise<number> {
  const runtime = await openOrFail(config);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    await serveMcpStdio({
      agent: runtime.agent,
      store: runtime.store,
      emit: (event) => runtime.tracer.write(event),
      sessions: runtime.sessions,
      dailyTokens: config.userDailyTokens,
      log: (line) => console.error(line),
    }, { userId, signal: stop.signal });
    return 0;
  } catch (error) {
    console.error(`Cannot serve MCP over stdio: ${errorMessage(error)}`);
    return 2;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await runtime.close();
  }
}

function loadChecked(check: (config: Readonly<Config>) => void, needsKey = true): Readonly<Config> {
  try {
    const config = loadConfig(readEnvironment(ENV_VARIABLES));
    if (needsKey) requireApiKey(config);
    check(config);
    return config;
  } catch (error) {
    if (error instanceof ConfigError || error instanceof SessionError) fail(error.message);
    throw error;
  }
}

function requirePermissions(config: Readonly<Config>, command: "chat" | "serve" | "mcp", model = true): void {
  const missing = missingPermissions(config, {
    listen: command === "serve",
    history: command === "chat",
    model,
  });
  if (missing.length === 0) return;
  // A compiled binary carries the grants of the settings it was compiled with: other settings need a rebuild.
  const how = Deno.build.standalone
    ? "this binary was compiled for other settings: run deno task compile with these"
    : `deno task ${command} grants exactly these`;
  fail(`Cannot start: missing permission ${missing.join(" ")} (${how})`);
}

/** Runs the program with `args` and resolves to its exit code. */
export async function main(args: string[]): Promise<number> {
  const telemetryProblem = await enableTelemetry(readEnvironment(TELEMETRY_VARIABLES));
  if (telemetryProblem !== null) console.warn(telemetryProblem);
  if (args[0] === "demo") return await demoMain(args.slice(1));
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: COMMAND_LINE_OPTIONS,
    });
  } catch (error) {
    // Node's own wording of an unknown option suggests `--` with unbalanced quotes: said plainly instead.
    const unknown = /^Unknown option '([^']*)'/.exec((error as Error).message);
    fail(
      `${unknown ? `Unknown option ${unknown[1]}` : (error as Error).message}. Run with --help for usage.`,
    );
  }
  const [command, ...rest] = parsed.positionals;
  if (parsed.values.help || command === "help") {
    console.log(helpText());
    return 0;
  }
  if (command === undefined) fail(`Missing command.\n\n${helpText()}`);
  const { session, user, demo, verbose } = parsed.values;
  if (command === "chat") {
    if (session !== undefined && parsed.values.continue) {
      fail("Cannot use --session and -c/--continue together: -c continues the last one-shot's session.");
    }
    const config = loadChecked(() => {
      if (session !== undefined) validateId(session);
      validateId(user, "user id");
    }, !demo);
    requirePermissions(config, "chat", !demo);
    const options = await chatOptions(rest, parsed.values["no-color"], parsed.values.schema);
    const sessionId = chatSession(
      config,
      { session, user, continue: parsed.values.continue },
      options.oneRun,
    );
    if (verbose) writeStderr(`session ${sessionId} (user ${user})\n`);
    return await chat(config, { sessionId, userId: user }, options, demo);
  }
  for (const [flag, given] of Object.entries({ session, "-c/--continue": parsed.values.continue, demo })) {
    if (given) fail(`${flag.startsWith("-") ? flag : `--${flag}`} is a chat option; ${command} takes none.`);
  }
  if (rest.length > 0) fail(`Unexpected argument "${rest[0]}". Run with --help for usage.`);
  if (parsed.values.schema !== undefined) {
    fail(`--schema is a chat option; ${command} takes none (an HTTP client sends response_format instead).`);
  }
  if (command === "mcp") {
    const config = loadChecked(() => validateId(user, "user id"));
    requirePermissions(config, "mcp");
    return await mcp(config, user);
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
  fail(`Unknown command "${command}"; available: chat, serve, mcp, demo. Run with --help for usage.`);
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
