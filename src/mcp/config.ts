/**
 * readMcpConfig(): the MCP servers file (AGENT_MCP_CONFIG) in the format other agents already use,
 * `{"mcpServers": {"name": {"command", "args", "env"} | {"url", "headers"}}}`, validated whole before any
 * server starts. The file's top-level `"approval"` value is passed through untouched for its own parser.
 * @module
 */
import { resolve } from "node:path";
import { ConfigError } from "../errors.ts";
import { isRecord } from "../_json.ts";

/** A server started as a child process and spoken to over its stdin and stdout. */
export interface StdioServerConfig {
  name: string;
  transport: "stdio";
  command: string;
  args: readonly string[];
  /** Variables given to the child besides the few it inherits (PATH, HOME, …). */
  env: Readonly<Record<string, string>>;
}

/** A server reached over Streamable HTTP. `headers` may hold tokens: never print or trace them. */
export interface HttpServerConfig {
  name: string;
  transport: "http";
  url: string;
  headers: Readonly<Record<string, string>>;
}

/** One entry of `mcpServers`. */
export type McpServerConfig = StdioServerConfig | HttpServerConfig;

/** The validated file: its servers in file order, and the raw `"approval"` value (undefined when absent). */
export interface McpFile {
  /** The absolute path the file was read from. */
  path: string;
  servers: readonly McpServerConfig[];
  approval: unknown;
}

const TOP_LEVEL_KEYS = ["mcpServers", "approval"];
const STDIO_KEYS = ["command", "args", "env", "type"];
const HTTP_KEYS = ["url", "headers", "type"];
/** `type` values other agents write for each transport; accepted when they agree with the entry. */
const STDIO_TYPES = ["stdio"];
const HTTP_TYPES = ["http", "streamable-http", "streamableHttp"];

function stringRecord(value: unknown, what: string, fail: (detail: string) => never): Record<string, string> {
  if (value === undefined) return {};
  if (!isRecord(value)) fail(`"${what}" must be an object of strings`);
  for (const [key, item] of Object.entries(value)) {
    // The value is never shown: headers and env carry tokens.
    if (typeof item !== "string") fail(`"${what}.${key}" must be a string, got ${describe(item)}`);
  }
  return { ...value } as Record<string, string>;
}

function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

function parseServer(name: string, entry: unknown, fail: (detail: string) => never): McpServerConfig {
  const at = (detail: string): never => fail(`server "${name}": ${detail}`);
  if (name.trim() === "") fail(`a server has an empty name`);
  if (!isRecord(entry)) return at(`expected an object, got ${describe(entry)}`);
  const hasCommand = "command" in entry;
  if (hasCommand === ("url" in entry)) return at(`give either "command" (stdio) or "url" (HTTP), not both`);
  const known = hasCommand ? STDIO_KEYS : HTTP_KEYS;
  const unknown = Object.keys(entry).find((key) => !known.includes(key));
  if (unknown !== undefined) return at(`unknown key "${unknown}" (expected ${known.join(", ")})`);
  const types = hasCommand ? STDIO_TYPES : HTTP_TYPES;
  if (entry.type !== undefined && !types.includes(entry.type as string)) {
    return at(`"type" must be ${types.map((t) => `"${t}"`).join(" or ")} for this entry`);
  }
  if (hasCommand) {
    const { command, args = [] } = entry;
    if (typeof command !== "string" || command.trim() === "") {
      return at(`"command" must be a non-empty string`);
    }
    if (!Array.isArray(args) || args.some((arg) => typeof arg !== "string")) {
      return at(`"args" must be an array of strings`);
    }
    const env = stringRecord(entry.env, "env", at);
    return Object.freeze({ name, transport: "stdio", command, args: Object.freeze([...args]), env });
  }
  const { url } = entry;
  let parsed: URL | null = null;
  try {
    parsed = typeof url === "string" ? new URL(url) : null;
  } catch { /* reported below */ }
  if (parsed === null || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    return at(`"url" must be an http:// or https:// URL`);
  }
  if (parsed.username !== "" || parsed.password !== "") {
    return at(`"url" must not hold a user or password; put credentials in "headers"`);
  }
  const headers = stringRecord(entry.headers, "headers", at);
  return Object.freeze({ name, transport: "http", url: parsed.href, headers });
}

/**
 * Validates the parsed JSON of an MCP file read from `path`. Throws `ConfigError` (AGENT_MCP_CONFIG) with one
 * line naming the file, the entry and the problem; never echoes an env or header value.
 */
export function parseMcpConfig(raw: unknown, path: string): McpFile {
  const fail = (detail: string): never => {
    throw new ConfigError("AGENT_MCP_CONFIG", `Invalid MCP config ${path} (AGENT_MCP_CONFIG): ${detail}`);
  };
  if (!isRecord(raw)) fail(`expected an object with "mcpServers", got ${describe(raw)}`);
  const top = raw as Record<string, unknown>;
  const unknown = Object.keys(top).find((key) => !TOP_LEVEL_KEYS.includes(key));
  if (unknown !== undefined) {
    fail(`unknown top-level key "${unknown}" (expected ${TOP_LEVEL_KEYS.join(", ")})`);
  }
  const servers = top.mcpServers ?? {};
  if (!isRecord(servers)) fail(`"mcpServers" must be an object of servers by name`);
  const parsed = Object.entries(servers as Record<string, unknown>).map(([name, entry]) =>
    parseServer(name, entry, fail)
  );
  return Object.freeze({ path, servers: Object.freeze(parsed), approval: top.approval });
}

/**
 * Reads the MCP file at `path` (relative to the working folder): null when there is no such file, or it may
 * not be read (the task grants it only when it exists), meaning no MCP.
 * Throws `ConfigError` with one line for a file that cannot be read, is not JSON, or has a bad entry.
 */
export function readMcpConfig(path: string): McpFile | null {
  const absolute = resolve(path);
  let text: string;
  try {
    text = Deno.readTextFileSync(absolute);
  } catch (error) {
    // Not readable under the task's flags: they grant the file only when it existed as they were computed.
    if (error instanceof Deno.errors.NotFound || error instanceof Deno.errors.NotCapable) return null;
    const reason = error instanceof Error ? error.message : String(error);
    throw new ConfigError(
      "AGENT_MCP_CONFIG",
      `Cannot read MCP config ${absolute} (AGENT_MCP_CONFIG): ${reason}`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    const reason = (error as Error).message;
    throw new ConfigError(
      "AGENT_MCP_CONFIG",
      `Invalid MCP config ${absolute} (AGENT_MCP_CONFIG): not JSON (${reason})`,
    );
  }
  return parseMcpConfig(raw, absolute);
}
