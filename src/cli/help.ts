/**
 * The program's usage text, built from the settings table so `--help` and the README never disagree.
 * @module
 */
import { SETTINGS } from "../config.ts";
import { TELEMETRY_VARIABLES } from "../telemetry.ts";

/** What `--help` prints: commands, options, every environment variable with its default, exit codes. */
export function helpText(): string {
  const width = Math.max(...Object.keys(SETTINGS).map((name) => name.length));
  const variables = Object.entries(SETTINGS)
    .map(([name, s]) => `  ${name.padEnd(width)}  ${s.meaning}${s.default ? ` (default ${s.default})` : ""}`)
    .join("\n");
  const telemetry = TELEMETRY_VARIABLES.map((name) =>
    `  ${name.padEnd(width)}  true: Deno exports OpenTelemetry spans, logs and metrics over OTLP/HTTP to ` +
    "OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318; docs/telemetry.md)"
  ).join("\n");
  return `mini-runtime-agent: a minimal, deterministic agent runtime.

Usage:
  deno task chat [--session ID | -c] [--user ID] [--demo] [-v] [--no-color] [--schema FILE]
                 [MESSAGE... | - [QUESTION...]]
  deno task serve
  deno task mcp [--user ID]
  deno task demo [--live] [--keep]

Commands:
  chat        talk to the agent: a REPL on a terminal (/help there lists its commands and keys), one
              turn per line when stdin is piped (printf 'what is 12*(3+4)?\\n' | deno task chat), or
              one turn for MESSAGE (deno task chat "what is 12*(3+4)?"); - sends all of stdin as one
              message; with QUESTION: QUESTION, a blank line, then stdin (cat notes.md | deno task chat - "sum up")
  serve       the HTTP API on AGENT_HOST:AGENT_PORT (routes: GET /openapi.json; MCP at /mcp with
              AGENT_SERVE_MCP=1)
  mcp         the agent as an MCP server on stdin/stdout, for a desktop client's mcpServers entry
              (docs/mcp.md); logs go to stderr
  demo        the four-phase acceptance demo (offline unless --live)

Options:
  --session ID   chat: session to use; 1-128 characters of A-Z a-z 0-9 . _ : -. Without it a one-shot
                 (MESSAGE) or piped run starts a fresh session (chat-xxxxxxxx) each time, one for the whole
                 run; the REPL uses "default"
  -c, --continue chat: use the session of the last one-shot or piped run (of --user), remembered in
                 AGENT_HISTORY_PATH.last_session; e.g. deno task chat -c "and times 2?"
  --user ID      chat, mcp: user who owns the sessions (default "local")
  --demo         chat: answer with the offline demo model (rules, not an LLM): no key, no network
  -v, --verbose  chat: print the session id on stderr
  --no-color     chat: no colour or bold (NO_COLOR set to anything, or TERM=dumb, does the same)
  --schema FILE  chat: every answer must be JSON valid against the JSON Schema in FILE (- : read it from
                 stdin): it is printed once checked; one still invalid after a repair request prints its
                 errors on stderr, and a one-shot or piped chat exits 1. deno task chat grants a read of
                 FILE alone, wherever it is
  -h, --help     show this help

Piped input is one turn per line; a line that is a /command (/help, /usage, /retry, /new, /switch, …) is
run as in the REPL, not sent to the model (/clear does nothing). Errors go to stderr, one line each.

Environment variables (.env is not read; use deno task --env-file=.env ... to load one):
${variables}
${telemetry}

Exit codes: 0 done; 1 a piped or one-shot turn ended in error (or, with --schema, without valid JSON);
2 bad usage, configuration or permissions; 3 a piped or one-shot run ended with a turn waiting for approval.`;
}
