/**
 * Every setting of the runtime, read from the environment, validated once, then frozen.
 * @module
 */
import { ConfigError } from "./errors.ts";
import {
  type ApiToken,
  type Kind,
  type KindValue,
  MIN_TOKEN_CHARS,
  parseValue,
  type ValueRule,
} from "./_config_values.ts";
import { fileURLToPath } from "node:url";

export { type ApiToken, MIN_TOKEN_CHARS };

/** Longest serialized tool result fed back to the model. */
export const MAX_TOOL_RESULT_CHARS = 2000;

/** The docs corpus that search_mock reads, next to the sources. */
export const DOCS_DIR = fileURLToPath(new URL("../data/docs", import.meta.url));

/** AGENT_COMPACT_BATCH when unset: half of AGENT_MAX_RAW_TURNS, at least 1. */
export function defaultCompactBatch(maxRawTurns: number): number {
  return Math.max(1, Math.floor(maxRawTurns / 2));
}

/**
 * The variables `names` from the process environment, reading only those it is allowed to (an unreadable
 * variable counts as unset; the task grants them all).
 */
export function readEnvironment(names: readonly string[]): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const name of names) {
    if (Deno.permissions.querySync({ name: "env", variable: name }).state === "granted") {
      env[name] = Deno.env.get(name);
    }
  }
  return env;
}

/** One variable: the field it sets, its kind, its default and its meaning. */
export interface Setting<K extends string = string, T extends Kind = Kind> extends ValueRule {
  key: K;
  kind: T;
  default: string;
  meaning: string;
}

/** One row of {@linkcode SETTINGS}. */
function setting<K extends string, T extends Kind>(
  key: K,
  kind: T,
  value: string,
  meaning: string,
  min?: number,
): Setting<K, T> {
  return { key, kind, default: value, meaning, ...(min === undefined ? {} : { min }) };
}

/** Each variable, its default and its meaning: the source of the README table and `--help`. */
export const SETTINGS = {
  OPENAI_API_KEY: setting(
    "apiKey",
    "string",
    "",
    "key for the provider; required unless the base URL host is loopback",
  ),
  OPENAI_BASE_URL: setting(
    "baseUrl",
    "url",
    "https://api.openai.com/v1",
    "any OpenAI-compatible endpoint (DeepSeek, a local server)",
  ),
  MODEL: setting("model", "string", "gpt-4o-mini", "model name (a claude-… name with LLM_API=anthropic)"),
  LLM_API: setting(
    "api",
    "api",
    "chat",
    "wire format: chat (Chat Completions at OPENAI_BASE_URL), anthropic (Messages at ANTHROPIC_BASE_URL, with ANTHROPIC_API_KEY), responses (OpenAI Responses at OPENAI_BASE_URL)",
  ),
  ANTHROPIC_API_KEY: setting(
    "anthropicApiKey",
    "string",
    "",
    "LLM_API=anthropic: key for Anthropic, sent as x-api-key; required unless the base URL host is loopback",
  ),
  ANTHROPIC_BASE_URL: setting(
    "anthropicBaseUrl",
    "url",
    "https://api.anthropic.com",
    "LLM_API=anthropic: the Messages API root (/v1/messages is added)",
  ),
  AGENT_THINKING_BUDGET: setting(
    "thinkingBudget",
    "positiveIntOrUnset",
    "",
    "LLM_API=anthropic: tokens Claude may think for before it answers (extended thinking, 1024 or more); its thinking goes back to Anthropic with the tool calls it precedes, never to the trace; unset = off",
    1024,
  ),
  AGENT_MAX_OUTPUT_TOKENS: setting(
    "maxOutputTokens",
    "positiveIntOrUnset",
    "",
    "most tokens of one model reply (max_tokens, max_output_tokens); unset = the provider's own, for Messages (which requires one) 8192 plus AGENT_THINKING_BUDGET",
  ),
  LLM_TIMEOUT_SECONDS: setting(
    "llmTimeoutSeconds",
    "positive",
    "60",
    "deadline of one model call, streamed or not, from request to last byte",
  ),
  LLM_MAX_REPLY_BYTES: setting(
    "llmMaxReplyBytes",
    "positiveInt",
    "1048576",
    "largest model reply accepted (streamed or whole); more ends the call with error too_large",
    1024,
  ),
  LLM_RETRIES: setting("llmRetries", "nonnegativeInt", "2", "retries of transient errors"),
  LLM_RETRY_BASE_DELAY: setting(
    "llmRetryBaseDelay",
    "nonnegative",
    "0.5",
    "exponential backoff base in seconds (0.5 s, 1.0 s, ...)",
  ),
  AGENT_MAX_TOOL_ITERS: setting("maxToolIters", "positiveInt", "8", "loop steps per user turn"),
  AGENT_MAX_TOOL_CALLS_PER_STEP: setting(
    "maxToolCallsPerStep",
    "positiveInt",
    "16",
    "tool calls run per model reply; each call beyond gets a tool error",
  ),
  AGENT_MAX_RAW_TURNS: setting("maxRawTurns", "positiveInt", "20", "recent raw turns kept before compaction"),
  AGENT_COMPACT_BATCH: setting(
    "compactBatch",
    "nonnegativeInt",
    "",
    "turns past AGENT_MAX_RAW_TURNS before they are compacted together, after the answer (unset: half of it, at least 1)",
  ),
  AGENT_MAX_CTX_TOKENS: setting(
    "maxCtxTokens",
    "positiveInt",
    "6000",
    "token budget of a request: the provider's count of the last one plus an estimate of what was added",
  ),
  AGENT_USER_MEMORY: setting(
    "userMemory",
    "flag",
    "1",
    "memory across a user's sessions: facts and goals kept at compaction and by the remember tool, recalled by relevance into each request; 0 turns it off",
  ),
  AGENT_USER_MEMORY_ITEMS: setting(
    "userMemoryItems",
    "positiveInt",
    "200",
    "items of memory kept per user; the least recently used leave first",
  ),
  AGENT_USER_MEMORY_RECALL: setting(
    "userMemoryRecall",
    "positiveInt",
    "5",
    "items of memory recalled into each request, the most relevant to the user's message (fewer when the token budget is short)",
  ),
  AGENT_MAX_TURN_TOKENS: setting(
    "maxTurnTokens",
    "positiveIntOrUnset",
    "",
    "tokens a turn may spend over its model calls, prompt + completion with cached prompt tokens included (reported, else estimated); a call that would pass it is not made and the turn ends with outcome budget; unset = no budget",
  ),
  AGENT_TURN_TIMEOUT_SECONDS: setting(
    "turnTimeoutSeconds",
    "positiveOrUnset",
    "",
    "seconds a whole turn may take, model calls and tools; past them it is taken back and ends with outcome timeout; unset = no deadline",
  ),
  AGENT_PRICES: setting(
    "prices",
    "prices",
    "",
    "comma-separated model=in/out[/cached[/write]] in dollars per million tokens (gpt-4o-mini=0.15/0.6/0.075, claude-sonnet-4-5=3/15/0.30/3.75): a cost in run_end, /usage and the web page, cached prompt tokens at the cached price and those written to the cache at the write price (each at in without one); a dated model name takes its base name's price",
  ),
  AGENT_DB_PATH: setting("dbPath", "string", "data/sessions.db", "SQLite file"),
  AGENT_DATABASE_URL: setting(
    "databaseUrl",
    "database",
    "",
    "postgres://user@host:port/db: sessions in PostgreSQL, shared by replicas (unset: SQLite at AGENT_DB_PATH)",
  ),
  AGENT_TRACE_PATH: setting("tracePath", "string", "data/traces.jsonl", "trace file"),
  AGENT_HISTORY_PATH: setting(
    "historyPath",
    "string",
    "data/chat_history",
    "chat: input history file (mode 600, the last 1,000 entries)",
  ),
  AGENT_TRACE_MAX_PAYLOAD_CHARS: setting(
    "traceMaxPayloadChars",
    "positiveInt",
    "2000",
    "longest string kept in a trace event",
  ),
  AGENT_TRACE_MAX_BYTES: setting(
    "traceMaxBytes",
    "positiveInt",
    "67108864",
    "trace file size that rotates it (the last 5 rotated files are kept)",
    4096,
  ),
  AGENT_TRACE_TABLE_MAX_EVENTS: setting(
    "traceTableMaxEvents",
    "positiveInt",
    "1000000",
    "trace events the database's trace table keeps, the newest, for the trace route (the files keep theirs)",
    100,
  ),
  AGENT_TRACE_RETENTION_DAYS: setting(
    "traceRetentionDays",
    "positive",
    "30",
    "days the database keeps a trace event for the trace route, deleted in the background (the files keep theirs)",
  ),
  AGENT_SESSION_RETENTION_DAYS: setting(
    "sessionRetentionDays",
    "positiveOrUnset",
    "",
    "days a session may stay idle (no write) before it is deleted with its messages, todos and trace events; unset = kept forever",
  ),
  RUN_LIVE_TESTS: setting("runLiveTests", "flag", "", "`1` plus a key runs the live tests"),
  AGENT_RESPONSE_FORMAT: setting(
    "responseFormatMode",
    "formatMode",
    "native",
    "how a client's response_format reaches the provider: native (sent as response_format) or prompt (the schema in the system message, for providers that reject it); the answer is checked either way",
  ),
  AGENT_REASONING_EFFORT: setting(
    "reasoningEffort",
    "effort",
    "",
    "low, medium or high: how hard a reasoning model thinks, sent as reasoning_effort (OpenAI o-series and GPT-5, DeepSeek, xAI, Groq); unset = not sent; a model that rejects it fails the call saying so",
  ),
  AGENT_TOKENIZER: setting(
    "tokenizer",
    "tokenizer",
    "",
    "count tokens exactly with OpenAI's tokenizer: o200k_base (GPT-4o and later) or cl100k_base (GPT-4); unset = estimated per script, calibrated by the provider's counts. Loads npm:js-tiktoken",
  ),
  AGENT_STREAM: setting(
    "stream",
    "flag",
    "1",
    "stream answers as they arrive (REPL, SSE): 1 or true; 0 or false turns it off",
  ),
  AGENT_SHOW_THINKING: setting(
    "showThinking",
    "flag",
    "0",
    'while a thinking model\'s reasoning streams in, show "reasoning…" (REPL, SSE reasoning events, the page); never its text: 1 or true; 0 or false (the default) shows the usual waiting line',
  ),
  AGENT_HOST: setting("host", "host", "127.0.0.1", "serve: address to listen on"),
  AGENT_PORT: setting("port", "port", "8787", "serve: port to listen on (0 picks one)"),
  AGENT_API_TOKENS: setting(
    "apiTokens",
    "tokens",
    "",
    `serve: comma-separated token:user_id pairs, tokens of ${MIN_TOKEN_CHARS}+ characters; unset = no auth, loopback only`,
  ),
  AGENT_ALLOWED_HOSTS: setting(
    "allowedHosts",
    "hosts",
    "",
    "serve: comma-separated host names (name or name:port) served without tokens besides 127.0.0.1, localhost and [::1], and whose pages may send requests: a proxy's",
  ),
  AGENT_SERVE_MCP: setting(
    "serveMcp",
    "flag",
    "0",
    "serve: 1 or true serves the agent as an MCP server at /mcp (Streamable HTTP; loads the MCP SDK)",
  ),
  AGENT_MAX_BODY_BYTES: setting(
    "maxBodyBytes",
    "positiveInt",
    "65536",
    "serve: largest request body accepted",
    1024,
  ),
  AGENT_USER_DAILY_TOKENS: setting(
    "userDailyTokens",
    "positiveIntOrUnset",
    "",
    "serve: tokens a user may spend per UTC day, prompt + completion with cached prompt tokens included, counted in the database (so across replicas); past them a turn gets 429 quota_exceeded until 00:00 UTC; unset = no quota",
  ),
  AGENT_MCP_CONFIG: setting(
    "mcpConfig",
    "string",
    "mcp.json",
    "MCP servers file (`mcpServers` or `servers`, as other agents write it); absent file = no MCP",
  ),
  AGENT_MCP_TIMEOUT_SECONDS: setting(
    "mcpTimeoutSeconds",
    "positive",
    "10",
    "deadline of each MCP tool call; progress the server reports starts it again, up to 10 times in all",
  ),
  AGENT_MCP_START_TIMEOUT_SECONDS: setting(
    "mcpStartTimeoutSeconds",
    "positive",
    "60",
    "deadline of each MCP server's start and tool list (a cold `npx -y` start fetches its package first)",
  ),
  AGENT_SHUTDOWN_GRACE_SECONDS: setting(
    "shutdownGraceSeconds",
    "nonnegative",
    "10",
    "serve: how long running turns may finish on SIGINT/SIGTERM",
  ),
  AGENT_SESSION_LEASE_SECONDS: setting(
    "sessionLeaseSeconds",
    "positive",
    "30",
    "a session's lease (one process at a time runs its turns), renewed while they run; a crashed holder's: free at once on its host",
  ),
} as const satisfies Readonly<Record<string, Setting>>;

/** The validated settings: a field for each variable of {@linkcode SETTINGS}, the value of its kind. */
export type Config = { [S in (typeof SETTINGS)[keyof typeof SETTINGS] as S["key"]]: KindValue[S["kind"]] };

/**
 * Reads and validates every setting from `env`. Unset or empty variables take their defaults.
 *
 * Throws `ConfigError` naming the variable, its value and what was expected; never reads `.env`.
 */
export function loadConfig(env: Record<string, string | undefined>): Readonly<Config> {
  const config: Record<string, unknown> = {};
  for (const [name, setting] of Object.entries(SETTINGS)) {
    const raw = env[name];
    const value = raw === undefined || raw === "" ? setting.default : raw;
    if (value === "" && setting.key === "compactBatch") continue;
    config[setting.key] = parseValue(name, setting, value);
  }
  config.compactBatch ??= defaultCompactBatch(config.maxRawTurns as number);
  if (config.api === "anthropic") {
    // The endpoint in use: what the client, the network grant, the probe and redaction read.
    config.baseUrl = config.anthropicBaseUrl;
    config.apiKey = config.anthropicApiKey;
  }
  checkModelApi(config as unknown as Config);
  return Object.freeze(config as unknown as Config);
}

/** Hosts whose model names say which wire format they need. */
const OPENAI_HOST = "api.openai.com";
const ANTHROPIC_HOST = "api.anthropic.com";

/**
 * Fails with `ConfigError` for settings that cannot work together: a Claude model sent to OpenAI's or
 * Anthropic's host as Chat Completions or Responses, another model sent to Anthropic's Messages, the thinking
 * budget outside Messages, a reasoning effort to Messages, a budget not under the output limit.
 */
function checkModelApi(config: Config): void {
  const { api, model, thinkingBudget, maxOutputTokens } = config;
  const host = new URL(config.baseUrl).hostname;
  const claude = /^claude-/i.test(model);
  if (claude && api !== "anthropic" && (host === OPENAI_HOST || host === ANTHROPIC_HOST)) {
    throw new ConfigError(
      "LLM_API",
      `MODEL=${model} is an Anthropic model: set LLM_API=anthropic and ANTHROPIC_API_KEY ` +
        `(LLM_API=${api} sends it to ${host})`,
    );
  }
  if (!claude && api === "anthropic" && host === ANTHROPIC_HOST) {
    throw new ConfigError(
      "MODEL",
      `MODEL=${model} is not a Claude model: LLM_API=anthropic needs one, e.g. MODEL=claude-sonnet-4-5`,
    );
  }
  if (thinkingBudget !== null && api !== "anthropic") {
    throw new ConfigError(
      "AGENT_THINKING_BUDGET",
      `AGENT_THINKING_BUDGET is Anthropic's extended thinking: set LLM_API=anthropic, or unset it and use ` +
        `AGENT_REASONING_EFFORT (LLM_API=${api})`,
    );
  }
  if (config.reasoningEffort !== null && api === "anthropic") {
    throw new ConfigError(
      "AGENT_REASONING_EFFORT",
      "AGENT_REASONING_EFFORT is not sent to Anthropic: unset it and set AGENT_THINKING_BUDGET (tokens)",
    );
  }
  if (thinkingBudget !== null && maxOutputTokens !== null && thinkingBudget >= maxOutputTokens) {
    throw new ConfigError(
      "AGENT_THINKING_BUDGET",
      `AGENT_THINKING_BUDGET=${thinkingBudget} must be less than AGENT_MAX_OUTPUT_TOKENS=${maxOutputTokens}`,
    );
  }
}

/** Whether a host name or address is loopback: `localhost`, `127.x.x.x` or `::1`. */
export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Whether the base URL's host is loopback: a local server needs no API key. */
export function isLoopbackUrl(baseUrl: string): boolean {
  return isLoopbackHost(new URL(baseUrl).hostname);
}

/** The setting that holds the key a wire format sends. */
export function apiKeySetting(api: Config["api"]): "ANTHROPIC_API_KEY" | "OPENAI_API_KEY" {
  return api === "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
}

/** Fails with `ConfigError` when the key is missing for a provider that is not on loopback. */
export function requireApiKey(config: Readonly<Config>): void {
  if (config.apiKey === "" && !isLoopbackUrl(config.baseUrl)) {
    const name = apiKeySetting(config.api);
    throw new ConfigError(
      name,
      `Missing ${name}: ${config.baseUrl} is not a loopback address, so a key is required`,
    );
  }
}
