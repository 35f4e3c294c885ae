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

/** A stdio server entry that runs `pkg` with `args` under Deno (the server itself gets every permission). */
export function denoServer(name: string, pkg: string, args: string[] = []): StdioServerConfig {
  return {
    name,
    transport: "stdio",
    command: "deno",
    args: ["run", "-A", "--quiet", pkg, ...args],
    env: denoEnvironment(),
  };
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
