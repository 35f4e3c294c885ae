/**
 * What `chat` and `serve` do about AGENT_MCP_CONFIG's file at start-up: read it, take its approval policy, and
 * when it names servers, load the SDK, start them all and list their tools. No file: nothing is loaded.
 * @module
 */
import { type ApprovalPolicy, autoApproving, parseApprovalPolicy } from "../approval/policy.ts";
import type { Config } from "../config.ts";
import { ConfigError, errorMessage } from "../errors.ts";
import { type McpFile, readMcpConfig } from "./config.ts";
import { type McpTools, startMcpTools } from "./mcp_tools.ts";
import { loadMcpSdk } from "./sdk.ts";

/**
 * What AGENT_MCP_CONFIG's file says, read once: its servers (started) and its approval policy (every tool
 * `auto` without a file). Throws `ConfigError` with one line for a malformed file or policy.
 */
export async function openToolConfig(
  config: Pick<Config, "mcpConfig" | "mcpTimeoutSeconds" | "mcpStartTimeoutSeconds" | "apiTokens">,
  warn: (line: string) => void,
): Promise<{ mcp: McpTools | null; approval: ApprovalPolicy }> {
  const file = readMcpConfig(config.mcpConfig);
  let approval: ApprovalPolicy;
  try {
    approval = autoApproving(parseApprovalPolicy(file?.approval, file?.path), file?.autoApproved ?? []);
  } catch (error) {
    throw new ConfigError("AGENT_MCP_CONFIG", errorMessage(error));
  }
  for (const line of file?.warnings ?? []) warn(line);
  return { mcp: await openMcp(file, config, warn), approval };
}

/**
 * The started servers of the MCP file, or null when there is none (or it names no server). A server that does
 * not start, or an SDK that cannot be loaded, is one `warn` line, never a failure.
 */
async function openMcp(
  file: McpFile | null,
  config: Pick<Config, "mcpTimeoutSeconds" | "mcpStartTimeoutSeconds" | "apiTokens">,
  warn: (line: string) => void,
): Promise<McpTools | null> {
  if (file === null || file.servers.length === 0) return null;
  let sdk;
  try {
    sdk = await loadMcpSdk();
  } catch (error) {
    warn(`Cannot load the MCP SDK, so no MCP server starts: ${errorMessage(error).split("\n")[0]}`);
    return null;
  }
  return await startMcpTools(file, {
    sdk,
    timeoutMs: config.mcpTimeoutSeconds * 1000,
    startTimeoutMs: config.mcpStartTimeoutSeconds * 1000,
    // Several users: a server's state is one user's unless its entry says it is shared.
    defaultScope: new Set(config.apiTokens.map((token) => token.userId)).size > 1 ? "user" : "shared",
    warn,
  });
}
