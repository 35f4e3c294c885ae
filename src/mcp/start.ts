/**
 * openMcp(): what `chat` and `serve` do about MCP at start-up: read AGENT_MCP_CONFIG's file, and when it names
 * servers, load the SDK, start them all and list their tools. No file: nothing is loaded.
 * @module
 */
import type { Config } from "../config.ts";
import { errorMessage } from "../errors.ts";
import { readMcpConfig } from "./config.ts";
import { McpTools } from "./mcp_tools.ts";
import { loadMcpSdk } from "./sdk.ts";

/**
 * The started servers of the configured MCP file, or null when there is none (or it names no server).
 * Throws `ConfigError` for a malformed file (the caller exits with code 2); a server that does not start,
 * or an SDK that cannot be loaded, is one `warn` line, never a failure.
 */
export async function openMcp(
  config: Pick<Config, "mcpConfig" | "mcpTimeoutSeconds">,
  warn: (line: string) => void,
): Promise<McpTools | null> {
  const file = readMcpConfig(config.mcpConfig);
  if (file === null || file.servers.length === 0) return null;
  let sdk;
  try {
    sdk = await loadMcpSdk();
  } catch (error) {
    warn(`Cannot load the MCP SDK, so no MCP server starts: ${errorMessage(error).split("\n")[0]}`);
    return null;
  }
  const tools = new McpTools(file, { sdk, timeoutMs: config.mcpTimeoutSeconds * 1000, warn });
  await tools.start();
  return tools;
}
