/**
 * Least privilege: the permission flags a task runs with, derived from the configuration at task start, and
 * the start-up check that names the exact flag that is missing.
 * @module
 */
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type Config, DOCS_DIR, loadConfig, SETTINGS } from "./config.ts";
import { TELEMETRY_VARIABLES } from "./telemetry.ts";
import { type McpFile, readMcpConfig } from "./mcp/config.ts";
import { INHERITED_ENV } from "./mcp/stdio_transport.ts";
import { POSTGRES_ENV } from "./store/postgres.ts";
import { parseDatabaseUrl } from "./database_url.ts";

/**
 * The lock of the runtime's optional packages (the MCP SDK, `@opentelemetry/api`, `postgres`): a task that
 * loads one runs with it, frozen, so each machine loads exactly what was locked.
 */
export const RUNTIME_LOCK = fileURLToPath(new URL("../deno.lock", import.meta.url));

/** Every environment variable the runtime reads: the only ones a task may see. */
export const ENV_VARIABLES: readonly string[] = Object.keys(SETTINGS);

/** Variables that say how the terminal wants output (colour or not), read by chat besides its settings. */
export const TERMINAL_VARIABLES: readonly string[] = ["NO_COLOR", "TERM"];

/** What `--allow-net` must grant to listen: `host:port`, or the host alone for port 0 (any free port). */
export function listenNetHost(config: Pick<Config, "host" | "port">): string {
  const host = config.host.includes(":") && !config.host.startsWith("[") ? `[${config.host}]` : config.host;
  return config.port === 0 ? host : `${host}:${config.port}`;
}

/** `host:port` of the base URL, with the scheme's default port filled in: what `--allow-net` must grant. */
export function llmNetHost(baseUrl: string): string {
  const url = new URL(baseUrl);
  const port = url.port || (url.protocol === "https:" ? "443" : "80");
  return `${url.hostname}:${port}`;
}

/**
 * What AGENT_DATABASE_URL adds to a task's grants: net to the database's host:port and the variables the
 * PostgreSQL client reads; nothing for SQLite.
 */
export function databaseGrants(config: Pick<Config, "databaseUrl">): { net: string[]; env: string[] } {
  if (config.databaseUrl === "") return { net: [], env: [] };
  return { net: [parseDatabaseUrl(config.databaseUrl).netHost], env: [...POSTGRES_ENV] };
}

/**
 * The folders a task reads and writes: the SQLite database's (none with PostgreSQL) and the trace's, and with
 * `history` chat's history. Absolute, unless `relative`: then each is as its setting gives it (`data` for
 * `data/sessions.db`), which a compiled binary resolves against its working directory at run time.
 */
function folders(config: Readonly<Config>, history = false, relative = false): string[] {
  const database = config.databaseUrl === "" ? [config.dbPath] : [];
  const paths = [...database, config.tracePath, ...(history ? [config.historyPath] : [])];
  return [...new Set(paths.map((path) => relative ? dirname(path) : dirname(resolve(path))))];
}

/**
 * What MCP servers add to a task's grants: `run` of each stdio server's command and the variables such a
 * server inherits (PATH, HOME, …), the variables the entries' `${VAR}` placeholders name, `net` to each URL
 * server's host:port. Nothing else widens.
 */
export function mcpGrants(file: McpFile | null): { run: string[]; env: string[]; net: string[] } {
  const servers = file?.servers ?? [];
  const run = [...new Set(servers.flatMap((s) => s.transport === "stdio" ? [s.command] : []))];
  const net = [...new Set(servers.flatMap((s) => s.transport !== "stdio" ? [llmNetHost(s.url)] : []))];
  const inherited = run.length > 0 ? INHERITED_ENV : [];
  return { run, env: [...new Set([...inherited, ...file?.variables ?? []])], net };
}

/** Options of {@linkcode taskPermissionFlags}. */
export interface TaskFlagsOptions {
  /**
   * `chat`, `serve` and `mcp` work on the configured database and trace (`serve` also listens on AGENT_HOST:
   * AGENT_PORT; `mcp` loads the MCP SDK); `demo` works on a fresh temporary folder instead; `compile` bakes in
   * what all three need for the configuration it is given (the target's), its data folders as the settings give
   * them: a relative one is resolved against the binary's working directory when it runs.
   * @default {"chat"}
   */
  task?: "chat" | "serve" | "mcp" | "demo" | "compile";
  /**
   * Where temporary folders are made (the demo's database and trace).
   * @default {"/tmp"}
   */
  tempDir?: string;
  /** Where the MCP file's `${VAR}` placeholders are read. @default {Deno.env} */
  mcpEnv?: Pick<Deno.Env, "get">;
  /**
   * Files the command line names for the program to read (`--schema FILE`, as absolute paths): each is
   * granted read alone, nothing beside it. @default {[]}
   */
  files?: readonly string[];
}

/**
 * The `deno run` flags for a task: read/write on the folders of the database and the trace (chat: and of
 * its input history; the demo: the
 * temporary folder), read of the docs corpus, the runtime's variables (and OTEL_DENO, which says whether to
 * record spans), and net to the LLM's host:port only (with AGENT_DATABASE_URL: and to the database's, with the
 * variables its client reads). Deno's OTLP exporter needs no grant. Chat and serve
 * also read AGENT_MCP_CONFIG's file and get what its servers need ({@linkcode mcpGrants}), and each file the
 * command line names (`options.files`); every task but the
 * demo reads the host name (`--allow-sys=hostname`), which names a lease's holder (without it, a crashed
 * process's leases expire instead of being taken at once). A task that loads an optional package (MCP
 * servers, a PostgreSQL URL, `OTEL_DENO=true`, serve's `/mcp`, the `mcp` task) runs with {@linkcode RUNTIME_LOCK}, frozen.
 * A configuration that does not load yields only the env grant, so the program itself reports the error.
 */
export function taskPermissionFlags(
  env: Record<string, string | undefined>,
  options: TaskFlagsOptions = {},
): string[] {
  const { task = "chat", tempDir = "/tmp", mcpEnv = Deno.env, files = [] } = options;
  const variables = [...ENV_VARIABLES, ...TERMINAL_VARIABLES, ...TELEMETRY_VARIABLES];
  const flags = [`--allow-env=${variables.join(",")}`];
  let config: Readonly<Config>;
  try {
    config = loadConfig(env);
  } catch {
    return flags;
  }
  let mcpFile: McpFile | null = null;
  const named: string[] = [];
  const recording = { get: (name: string) => (named.push(name), mcpEnv.get(name)) };
  try {
    if (task === "chat" || task === "serve" || task === "mcp") {
      mcpFile = readMcpConfig(config.mcpConfig, { env: recording });
    }
  } catch {
    // A malformed file: the program may read it, to report the problem, and its servers get nothing. The
    // variables read up to the problem are granted, so an unset one is said to be unset, not unreadable.
    mcpFile = { path: resolve(config.mcpConfig), servers: [], approval: undefined, variables: named };
  }
  const mcp = mcpGrants(mcpFile);
  const database = databaseGrants(config);
  const extra = [...mcp.env, ...database.env];
  if (extra.length > 0) flags[0] = `--allow-env=${[...new Set([...variables, ...extra])].join(",")}`;
  // The temporary folder of a compiled binary holds the demo's files and the embedded docs corpus too.
  const writable = task === "demo"
    ? [resolve(tempDir)]
    : task === "compile"
    ? [...folders(config, true, true), resolve(tempDir)]
    : folders(config, task === "chat");
  const docs = task === "compile" ? [] : [DOCS_DIR];
  const readable = [...writable, ...docs, ...(mcpFile === null ? [] : [mcpFile.path]), ...files];
  flags.push(`--allow-read=${readable.join(",")}`);
  flags.push(`--allow-write=${writable.join(",")}`);
  const net = [llmNetHost(config.baseUrl)];
  if (task === "serve" || task === "compile") net.push(listenNetHost(config));
  flags.push(`--allow-net=${[...new Set([...net, ...database.net, ...mcp.net])].join(",")}`);
  if (mcp.run.length > 0) flags.push(`--allow-run=${mcp.run.join(",")}`);
  // The host name in a lease's owner: a process takes at once the leases of a crashed one of its own host.
  if (task !== "demo") flags.push("--allow-sys=hostname");
  // Only then: Deno fetches a lock's whole npm snapshot at start, and without these nothing needs a registry.
  const optional = mcp.run.length + mcp.net.length > 0 || config.databaseUrl !== "" ||
    env.OTEL_DENO === "true" || config.tokenizer !== "" || (task === "serve" && config.serveMcp) ||
    task === "mcp";
  if (optional && task !== "compile") flags.push(`--lock=${RUNTIME_LOCK}`, "--frozen");
  return flags;
}

/**
 * The flags this process lacks to do its work (with `listen`, also to listen on AGENT_HOST:AGENT_PORT; with
 * `history`, to keep chat's input history; without `model`, the demo model's, none to the provider), each
 * spelled as it must be passed; empty when all are granted.
 * Queries without prompting.
 */
export function missingPermissions(
  config: Readonly<Config>,
  options: { listen?: boolean; history?: boolean; model?: boolean } = {},
): string[] {
  const missing: string[] = [];
  const want = (descriptor: Deno.PermissionDescriptor, value: string) => {
    if (Deno.permissions.querySync(descriptor).state !== "granted") {
      missing.push(`--allow-${descriptor.name}=${value}`);
    }
  };
  const { model = true } = options;
  const hosts = [...(model ? [llmNetHost(config.baseUrl)] : []), ...databaseGrants(config).net];
  if (options.listen) hosts.push(listenNetHost(config));
  for (const host of hosts) want({ name: "net", host }, host);
  for (const variable of databaseGrants(config).env) want({ name: "env", variable }, variable);
  for (const path of folders(config, options.history)) {
    want({ name: "read", path }, path);
    want({ name: "write", path }, path);
  }
  want({ name: "read", path: DOCS_DIR }, DOCS_DIR);
  return missing;
}
