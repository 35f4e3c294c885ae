/**
 * The entry point: parses the command line, builds the real dependencies (fetch client, SQLite file, trace
 * file, clock) and dispatches to a subcommand. The only module that touches the process.
 * @module
 */
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { runChat } from "./cli/chat.ts";
import { type Config, loadConfig, requireApiKey, SETTINGS } from "./config.ts";
import { ConfigError, SessionError } from "./errors.ts";
import { createLlmFromConfig } from "./llm/openai.ts";
import { missingPermissions, readEnvironment } from "./permissions.ts";
import { SessionStore, validateId } from "./store.ts";
import { createBuiltinTools } from "./tools/builtin.ts";
import { createLlmSummarizer } from "./summarizer.ts";
import { JsonlTracer } from "./trace.ts";

function helpText(): string {
  const width = Math.max(...Object.keys(SETTINGS).map((name) => name.length));
  const variables = Object.entries(SETTINGS)
    .map(([name, s]) => `  ${name.padEnd(width)}  ${s.meaning}${s.default ? ` (default ${s.default})` : ""}`)
    .join("\n");
  return `mini-runtime-agent: a minimal, deterministic agent runtime.

Usage:
  deno task chat [--session ID] [--user ID]

Commands:
  chat        talk to the agent: a REPL on a terminal, one turn per line when stdin is piped
              (e.g. printf 'what is 12*(3+4)?\\n' | deno task chat)

Options:
  --session ID   session to use (default "default"); 1-128 characters of A-Z a-z 0-9 . _ : -
  --user ID      user who owns the session (default "local")
  -h, --help     show this help

Environment variables (.env is not read; use deno run --env-file=.env ... to load one):
${variables}

Exit codes: 0 done; 1 a piped turn ended in error; 2 bad usage, configuration or permissions.`;
}

function fail(message: string): never {
  console.error(message);
  Deno.exit(2);
}

async function chat(config: Readonly<Config>, sessionId: string, userId: string): Promise<number> {
  mkdirSync(dirname(config.dbPath), { recursive: true });
  const store = new SessionStore(config.dbPath);
  const tracer = new JsonlTracer(config.tracePath, {
    maxPayloadChars: config.traceMaxPayloadChars,
    secrets: [config.apiKey],
  });
  try {
    store.getOrCreate(sessionId, userId);
    const llm = createLlmFromConfig(config);
    return await runChat({
      sessionId,
      userId,
      deps: {
        store,
        llm,
        tools: createBuiltinTools(store),
        maxSteps: config.maxToolIters,
        summarizer: createLlmSummarizer(llm),
        maxRawTurns: config.maxRawTurns,
        maxCtxTokens: config.maxCtxTokens,
      },
      emit: (event) => tracer.write(event),
      input: process.stdin,
      output: process.stdout,
      status: process.stderr,
      interactive: Deno.stdin.isTerminal(),
    });
  } finally {
    tracer.close();
    store.close();
  }
}

/** Runs the program with `args` and resolves to its exit code. */
export async function main(args: string[]): Promise<number> {
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
  if (command !== "chat") fail(`Unknown command "${command}"; available: chat. Run with --help for usage.`);
  if (rest.length > 0) fail(`Unexpected argument "${rest[0]}". Run with --help for usage.`);

  let config: Readonly<Config>;
  try {
    config = loadConfig(readEnvironment());
    requireApiKey(config);
    validateId(parsed.values.session);
    validateId(parsed.values.user, "user id");
  } catch (error) {
    if (error instanceof ConfigError || error instanceof SessionError) fail(error.message);
    throw error;
  }
  const missing = missingPermissions(config);
  if (missing.length > 0) {
    fail(`Cannot start: missing permission ${missing.join(" ")} (deno task chat grants exactly these)`);
  }
  return await chat(config, parsed.values.session, parsed.values.user);
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
