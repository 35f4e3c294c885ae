/**
 * loadMcpSdk() and loadMcpServerSdk(): the official MCP SDK, pinned, loaded only when an MCP config file
 * exists (the client side) or the agent is served over MCP (`AGENT_SERVE_MCP`, `deno task mcp`), so a user
 * without MCP needs nothing from a package registry.
 * @module
 */
import type { Client } from "npm:@modelcontextprotocol/sdk@1.32.2/client/index.js";
import type { StreamableHTTPClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
import type { SSEClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/sse.js";
import type { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server/index.js";
import type { WebStandardStreamableHTTPServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp.js";
import type { StdioServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/stdio.js";
import type * as Types from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";

/**
 * The SDK package, pinned. Imported through a variable: Deno tries to download a string-literal dynamic
 * import at start-up even when it never runs.
 */
const SDK_PACKAGE = "npm:@modelcontextprotocol/sdk@1.32.2";

/** The parts of the SDK the client uses (stdio goes through Deno's own process API instead). */
export interface McpSdk {
  Client: typeof Client;
  StreamableHTTPClientTransport: typeof StreamableHTTPClientTransport;
  /** The older HTTP+SSE transport, for servers configured with `"type": "sse"`. */
  SSEClientTransport: typeof SSEClientTransport;
}

/** Loads the SDK (from Deno's npm cache, or the registry the first time). Rejects when it cannot be loaded. */
export async function loadMcpSdk(): Promise<McpSdk> {
  const [client, http, sse] = await Promise.all([
    import(`${SDK_PACKAGE}/client/index.js`),
    import(`${SDK_PACKAGE}/client/streamableHttp.js`),
    import(`${SDK_PACKAGE}/client/sse.js`),
  ]);
  return {
    Client: client.Client,
    StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
    SSEClientTransport: sse.SSEClientTransport,
  };
}

/** The parts of the SDK the agent's own MCP server uses. */
export interface McpServerSdk {
  Server: typeof Server;
  WebStandardStreamableHTTPServerTransport: typeof WebStandardStreamableHTTPServerTransport;
  StdioServerTransport: typeof StdioServerTransport;
  /** The protocol's request schemas, error class and codes. */
  types: typeof Types;
}

/** Loads the server side of the SDK (as {@linkcode loadMcpSdk} does). Rejects when it cannot be loaded. */
export async function loadMcpServerSdk(): Promise<McpServerSdk> {
  const [server, http, stdio, types] = await Promise.all([
    import(`${SDK_PACKAGE}/server/index.js`),
    import(`${SDK_PACKAGE}/server/webStandardStreamableHttp.js`),
    import(`${SDK_PACKAGE}/server/stdio.js`),
    import(`${SDK_PACKAGE}/types.js`),
  ]);
  return {
    Server: server.Server,
    WebStandardStreamableHTTPServerTransport: http.WebStandardStreamableHTTPServerTransport,
    StdioServerTransport: stdio.StdioServerTransport,
    types,
  };
}
