/**
 * readMcpConfig(): the MCP servers file (AGENT_MCP_CONFIG) in the forms other agents already use, validated
 * whole before any server starts: `{"mcpServers": {"name": {"command", "args", "env"} | {"url", "headers"}}}`
 * (Claude Desktop, Cursor), `"servers"` with `"type": "stdio" | "http" | "sse"` (VS Code), and Cline's entries
 * with `"disabled"` (the server is skipped) and `"autoApprove"` (its tools named there run without asking);
 * this runtime's own `"scope"` and `"safeToRepeat"` (`{"tool": true | false}`, over the tools' annotations).
 * `${VAR}`, `${env:VAR}`, `${VAR:-default}` and `${workspaceFolder}` in `command`, `args`, `env` values, `url`
 * and `headers` values are filled in ({@linkcode expandPlaceholders}); `${user}` is left for a user's instance.
 * A key it does not know is a warning, not an error. The file's top-level `"approval"` value is passed
 * through untouched for its own parser.
 * @module
 */
import { resolve } from "node:path";
import { ConfigError, errorMessage } from "../errors.ts";
import { isRecord } from "../_json.ts";
import { exposedToolName } from "./tool_names.ts";
import { expandPlaceholders, type PlaceholderOptions } from "./placeholders.ts";

/** A server started as a child process and spoken to over its stdin and stdout. */
export interface StdioServerConfig {
  name: string;
  transport: "stdio";
  command: string;
  args: readonly string[];
  /** Variables given to the child besides the few it inherits (PATH, HOME, …). */
  env: Readonly<Record<string, string>>;
  /** One instance per user (`${user}` in args and env values is the user's id), or one for all. */
  scope?: "user" | "shared";
  /** Per tool (the server's own name): safe to repeat or not, over what the tool's annotations say. */
  safeToRepeat?: Readonly<Record<string, boolean>>;
  /**
   * The values the entry took from the environment (`${VAR}`), kept out of what is shown of the server (its
   * stderr) as its env values are.
   */
  secrets?: readonly string[];
}

/**
 * A server reached over HTTP: Streamable HTTP, or the older HTTP+SSE transport (`"type": "sse"`). `headers`
 * may hold tokens: never print or trace them.
 */
export type HttpServerConfig = Pick<StdioServerConfig, "name" | "scope" | "safeToRepeat"> & {
  transport: "http" | "sse";
  url: string;
  headers: Readonly<Record<string, string>>;
};

/** One entry of `mcpServers`. */
export type McpServerConfig = StdioServerConfig | HttpServerConfig;

/** The validated file: its servers in file order, and the raw `"approval"` value (undefined when absent). */
export interface McpFile {
  /** The absolute path the file was read from. */
  path: string;
  /** The servers to start: those not `"disabled"`. */
  servers: readonly McpServerConfig[];
  approval: unknown;
  /** Tools the entries' `"autoApprove"` lists name (as `<server>__<tool>`): they run without asking. */
  autoApproved?: readonly string[];
  /** One line for each key that was ignored because this program does not know it. */
  warnings?: readonly string[];
  /** The environment variables the servers' entries read (`${VAR}`), each once: the task grants them. */
  variables?: readonly string[];
}

/** Options of {@linkcode parseMcpConfig} and {@linkcode readMcpConfig}: where `${…}` placeholders come from. */
export type McpConfigOptions = PlaceholderOptions;

const TOP_LEVEL_KEYS = ["mcpServers", "servers", "approval"];
/** Keys of an entry of either kind: Cline's (`alwaysAllow` is Roo Code's name for `autoApprove`). */
const COMMON_KEYS = [
  "type",
  "transportType",
  "disabled",
  "autoApprove",
  "alwaysAllow",
  "scope",
  "safeToRepeat",
];
const STDIO_KEYS = ["command", "args", "env", ...COMMON_KEYS];
const HTTP_KEYS = ["url", "headers", ...COMMON_KEYS];
/** `type` values other agents write for each transport; accepted when they agree with the entry. */
const STDIO_TYPES = ["stdio"];
const HTTP_TYPES = ["http", "streamable-http", "streamableHttp", "sse"];

/** An entry as read: the server to start (null when disabled), the tools it approves, the variables it read. */
interface ParsedEntry {
  server: McpServerConfig | null;
  autoApprove: readonly string[];
  variables: readonly string[];
}

/** Fills an entry's placeholders in `text` (its field `where`), keeping what it read; fails on a problem. */
type Expand = (text: string, where: string) => string;

/** What an entry read from the environment as its placeholders were filled. */
interface EntryReads {
  variables: string[];
  values: string[];
}

function expander(options: McpConfigOptions, fail: (detail: string) => never): [Expand, EntryReads] {
  const reads: EntryReads = { variables: [], values: [] };
  const expand = (text: string, where: string) => {
    const expansion = expandPlaceholders(text, where, options);
    if (!expansion.ok) return fail(expansion.problem);
    reads.variables.push(...expansion.variables);
    reads.values.push(...expansion.values);
    return expansion.text;
  };
  return [expand, reads];
}

function stringRecord(
  value: unknown,
  what: string,
  fail: (detail: string) => never,
  expand: Expand,
): Record<string, string> {
  if (value === undefined) return {};
  if (!isRecord(value)) fail(`"${what}" must be an object of strings`);
  const record: Record<string, string> = {};
  for (const [key, item] of Object.entries(value)) {
    // The value is never shown: headers and env carry tokens.
    if (typeof item !== "string") fail(`"${what}.${key}" must be a string, got ${describe(item)}`);
    record[key] = expand(item as string, `${what}.${key}`);
  }
  return record;
}

function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

function parseServer(
  name: string,
  entry: unknown,
  fail: (detail: string) => never,
  warn: (line: string) => void,
  options: McpConfigOptions,
): ParsedEntry {
  const at = (detail: string): never => fail(`server "${name}": ${detail}`);
  if (name.trim() === "") fail(`a server has an empty name`);
  if (!isRecord(entry)) return at(`expected an object, got ${describe(entry)}`);
  const { disabled = false } = entry;
  if (typeof disabled !== "boolean") return at(`"disabled" must be true or false, got ${describe(disabled)}`);
  const autoApprove = entry.autoApprove ?? entry.alwaysAllow ?? [];
  if (!Array.isArray(autoApprove) || autoApprove.some((tool) => typeof tool !== "string" || tool === "")) {
    return at(`"autoApprove" must be an array of tool names`);
  }
  if (disabled) return { server: null, autoApprove, variables: [] };
  const hasCommand = "command" in entry;
  if (hasCommand === ("url" in entry)) return at(`give either "command" (stdio) or "url" (HTTP), not both`);
  const known = hasCommand ? STDIO_KEYS : HTTP_KEYS;
  for (const key of Object.keys(entry).filter((key) => !known.includes(key))) {
    warn(`server "${name}": ignored the unknown key "${key}" (known: ${known.join(", ")})`);
  }
  const types = hasCommand ? STDIO_TYPES : HTTP_TYPES;
  const type = entry.type ?? entry.transportType;
  if (type !== undefined && !types.includes(type as string)) {
    return at(`"type" must be ${types.map((t) => `"${t}"`).join(" or ")} for this entry`);
  }
  const { scope, safeToRepeat } = entry;
  if (scope !== undefined && scope !== "user" && scope !== "shared") {
    return at(`"scope" must be "user" or "shared"`);
  }
  if (
    safeToRepeat !== undefined &&
    (!isRecord(safeToRepeat) || Object.values(safeToRepeat).some((value) => typeof value !== "boolean"))
  ) {
    return at(`"safeToRepeat" must be an object of tool names to true or false`);
  }
  const [expand, reads] = expander(options, at);
  const server = hasCommand
    ? stdioServer(name, entry, at, expand)
    : httpServer(name, entry, type, at, expand);
  const secrets = [...new Set(reads.values)];
  const extra: Pick<StdioServerConfig, "scope" | "safeToRepeat" | "secrets"> = {
    ...(scope === undefined ? {} : { scope }),
    ...(safeToRepeat === undefined
      ? {}
      : { safeToRepeat: Object.freeze({ ...safeToRepeat }) as Record<string, boolean> }),
    ...(hasCommand && secrets.length > 0 ? { secrets: Object.freeze(secrets) } : {}),
  };
  return {
    server: Object.keys(extra).length === 0 ? server : Object.freeze({ ...server, ...extra }),
    autoApprove,
    variables: reads.variables,
  };
}

function stdioServer(
  name: string,
  entry: Record<string, unknown>,
  at: (detail: string) => never,
  expand: Expand,
): StdioServerConfig {
  const { args = [] } = entry;
  let { command } = entry;
  if (typeof command === "string") command = expand(command, "command");
  if (typeof command !== "string" || command.trim() === "") {
    return at(`"command" must be a non-empty string`);
  }
  if (!Array.isArray(args) || args.some((arg) => typeof arg !== "string")) {
    return at(`"args" must be an array of strings`);
  }
  const filled = args.map((arg: string, index) => expand(arg, `args[${index}]`));
  const env = stringRecord(entry.env, "env", at, expand);
  return Object.freeze({ name, transport: "stdio", command, args: Object.freeze(filled), env });
}

function httpServer(
  name: string,
  entry: Record<string, unknown>,
  type: unknown,
  at: (detail: string) => never,
  expand: Expand,
): HttpServerConfig {
  const url = typeof entry.url === "string" ? expand(entry.url, "url") : entry.url;
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
  const headers = stringRecord(entry.headers, "headers", at, expand);
  return Object.freeze({ name, transport: type === "sse" ? "sse" : "http", url: parsed.href, headers });
}

/**
 * Validates the parsed JSON of an MCP file read from `path` and fills its entries' placeholders. Throws
 * `ConfigError` (AGENT_MCP_CONFIG) with one line naming the file, the entry and the problem (a variable by its
 * name); never echoes an env or header value, nor a variable's.
 */
export function parseMcpConfig(raw: unknown, path: string, options: McpConfigOptions = {}): McpFile {
  const fail = (detail: string): never => {
    throw new ConfigError("AGENT_MCP_CONFIG", `Invalid MCP config ${path} (AGENT_MCP_CONFIG): ${detail}`);
  };
  if (!isRecord(raw)) fail(`expected an object with "mcpServers", got ${describe(raw)}`);
  const top = raw as Record<string, unknown>;
  const warnings: string[] = [];
  for (const key of Object.keys(top).filter((key) => !TOP_LEVEL_KEYS.includes(key))) {
    warnings.push(`ignored the unknown top-level key "${key}" (known: ${TOP_LEVEL_KEYS.join(", ")})`);
  }
  const entries: [string, unknown][] = [];
  for (const key of ["mcpServers", "servers"]) {
    const servers = top[key] ?? {};
    if (!isRecord(servers)) fail(`"${key}" must be an object of servers by name`);
    for (const [name, entry] of Object.entries(servers as Record<string, unknown>)) {
      if (entries.some(([seen]) => seen === name)) {
        fail(`server "${name}" is named in both "mcpServers" and "servers"`);
      }
      entries.push([name, entry]);
    }
  }
  const servers: McpServerConfig[] = [];
  const autoApproved: string[] = [];
  const variables = new Set<string>();
  for (const [name, entry] of entries) {
    const parsed = parseServer(name, entry, fail, (line) => warnings.push(line), options);
    if (parsed.server !== null) servers.push(parsed.server);
    autoApproved.push(...parsed.autoApprove.map((tool) => exposedToolName(name, tool)));
    for (const variable of parsed.variables) variables.add(variable);
  }
  return Object.freeze({
    path,
    servers: Object.freeze(servers),
    approval: top.approval,
    autoApproved: Object.freeze(autoApproved),
    warnings: Object.freeze(warnings.map((line) => `MCP config ${path}: ${line}`)),
    variables: Object.freeze([...variables]),
  });
}

/**
 * Reads the MCP file at `path` (relative to the working folder): null when there is no such file, or it may
 * not be read (the task grants it only when it exists), meaning no MCP. Placeholders come from `Deno.env` and
 * the working folder unless `options` say otherwise.
 * Throws `ConfigError` with one line for a file that cannot be read, is not JSON, or has a bad entry (an
 * unset variable or an `${input:…}` among them).
 */
export function readMcpConfig(path: string, options: McpConfigOptions = {}): McpFile | null {
  const absolute = resolve(path);
  let text: string;
  try {
    text = Deno.readTextFileSync(absolute);
  } catch (error) {
    // Not readable under the task's flags: they grant the file only when it existed as they were computed.
    if (error instanceof Deno.errors.NotFound || error instanceof Deno.errors.NotCapable) return null;
    throw new ConfigError(
      "AGENT_MCP_CONFIG",
      `Cannot read MCP config ${absolute} (AGENT_MCP_CONFIG): ${errorMessage(error)}`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(
      "AGENT_MCP_CONFIG",
      `Invalid MCP config ${absolute} (AGENT_MCP_CONFIG): not JSON (${(error as Error).message})`,
    );
  }
  return parseMcpConfig(raw, absolute, options);
}
