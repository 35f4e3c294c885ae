/**
 * The real MCP servers the tests start, pinned: npm packages run by Deno from its npm cache (fetched from the
 * registry on first use, like the test-only packages of _dev_deps.ts), never installed for the runtime.
 * @module
 */
import type { StdioServerConfig } from "../src/mcp/config.ts";

/** The reference server with every kind of tool and content. */
export const EVERYTHING = "npm:@modelcontextprotocol/server-everything@2026.8.31";
/** The knowledge-graph server, which keeps its graph in the file MEMORY_FILE_PATH names. */
export const MEMORY = "npm:@modelcontextprotocol/server-memory@2026.8.31";
/** The filesystem server, confined to the folders it is given. */
export const FILESYSTEM = "npm:@modelcontextprotocol/server-filesystem@2026.8.31";

/**
 * What a `deno` child needs of this process's environment to find or fetch a package as this process does:
 * its cache (`DENO_DIR`), the machine's certificates and proxies, the npm registry. A stdio server inherits
 * only PATH, HOME and the like, so the test configs pass these on.
 */
export function denoEnvironment(): Record<string, string> {
  const wanted =
    /^(DENO_DIR|DENO_CERT|DENO_TLS_CA_STORE|SSL_CERT_FILE|SSL_CERT_DIR|NODE_EXTRA_CA_CERTS|HTTPS?_PROXY|NO_PROXY|NPM_CONFIG_REGISTRY)$/i;
  return Object.fromEntries(Object.entries(Deno.env.toObject()).filter(([name]) => wanted.test(name)));
}

/** The test lock, which locks these servers too: they run as locked, from the cache the tests fill. */
const TEST_LOCK = new URL("./deno.lock", import.meta.url).pathname;

/** A stdio server entry that runs `pkg` with `args` under Deno (the server itself gets every permission). */
export function denoServer(name: string, pkg: string, args: string[] = []): StdioServerConfig {
  return {
    name,
    transport: "stdio",
    command: "deno",
    args: denoServerArgs(pkg, args),
    env: denoEnvironment(),
  };
}

/** The `deno run` arguments of `pkg` as a locked test server (`args` after it). */
export function denoServerArgs(pkg: string, args: string[] = []): string[] {
  return ["run", "-A", "--quiet", `--lock=${TEST_LOCK}`, "--frozen", pkg, ...args];
}

/**
 * Why the test-only `packages` (what they are: `what`) cannot run here, or null: cached as `tests/deno.lock`
 * locks them (from Deno's cache, or the registry), in a child `deno cache` with this process's environment.
 */
export async function uncached(packages: readonly string[], what: string): Promise<string | null> {
  const output = await new Deno.Command("deno", {
    args: ["cache", "--quiet", `--lock=${TEST_LOCK}`, "--frozen", ...packages],
    env: { NO_COLOR: "1" },
    stdout: "null",
    stderr: "piped",
  }).output();
  if (output.success) return null;
  const why = new TextDecoder().decode(output.stderr).trim().split("\n")[0];
  return `${what} cannot be had here (${why})`;
}

/**
 * Why these servers cannot run here (not in Deno's cache, and no registry to fetch them from), or null. Found
 * once, by caching them as locked; a test that needs them is ignored with this reason, never failed.
 */
const missing = await uncached([EVERYTHING, FILESYSTEM, MEMORY], "the MCP test servers");
if (missing !== null) console.error(`Ignoring the tests of real MCP servers: ${missing}`);

/** A test that runs the real MCP servers above: ignored, saying why once, where they cannot be had. */
export function mcpTest(name: string, fn: () => Promise<void>): void {
  Deno.test({ name, ignore: missing !== null, fn });
}

/** A stdio server entry that runs the script `source` (a fault fixture) with `deno run` and `args`. */
export function scriptServer(name: string, source: string, args: string[] = []): StdioServerConfig {
  return {
    name,
    transport: "stdio",
    command: "deno",
    args: ["run", "--quiet", source, ...args],
    env: denoEnvironment(),
  };
}
