/**
 * McpTools: every configured MCP server's tools as one {@linkcode ToolSource} for the tool registry, named
 * `<server>__<tool>`, their descriptions and input schemas passed through, each call answered as a tool
 * result. Servers start together at start-up; one that fails is one warning line and its tools are absent.
 * @module
 */
import { shorten } from "../shorten.ts";
import type { JsonSchema } from "../tools/json_schema.ts";
import type { ToolSource, ToolSpec } from "../tools/registry.ts";
import { contentText, toolData } from "./call_result.ts";
import type { McpFile } from "./config.ts";
import { type ListedTool, McpConnection, type ServerHealth } from "./connection.ts";
import { UserServers, type UserServersOptions } from "./user_servers.ts";
import { ToolNames } from "./tool_names.ts";

/** Longest error text of a failed MCP call kept in its tool result. */
const MAX_ERROR_CHARS = 1000;

/** Options of {@linkcode startMcpTools}: those of each connection, and the scope of servers that name none. */
export interface McpToolsOptions extends Omit<UserServersOptions, "onToolsChanged"> {
  /**
   * The scope of a server whose entry has no `"scope"`: `user` where more than one user is configured.
   * @default {"shared"}
   */
  defaultScope?: "user" | "shared";
}

/** A server as the tools call it: one instance for all, or one per user. */
type Server = McpConnection | UserServers;

/** The servers of an MCP file and their tools. */
export class McpTools implements ToolSource {
  #connections: Server[];
  #names = new ToolNames();
  #specs: readonly ToolSpec[] = [];
  #version = 0;
  #warn: (line: string) => void;
  /** Tools already said to be left out: each is said once, not at every change of the list. */
  #leftOut = new Set<string>();

  constructor(file: McpFile, options: McpToolsOptions) {
    this.#warn = options.warn ?? (() => {});
    const { defaultScope = "shared", ...serverOptions } = options;
    this.#connections = file.servers.map((config) => {
      const each = { ...serverOptions, onToolsChanged: () => this.#rebuild() };
      return (config.scope ?? defaultScope) === "user"
        ? new UserServers(config, each)
        : new McpConnection(config, each);
    });
  }

  /** Bumped whenever the tool list changes, so registries offer the new list from their next turn on. */
  get version(): number {
    return this.#version;
  }

  /** Every server's current tools, in config order. */
  tools(): readonly ToolSpec[] {
    return this.#specs;
  }

  /** Starts every server at once and lists their tools; resolves when all have started or failed. */
  async start(): Promise<void> {
    await Promise.all(this.#connections.map((connection) => connection.start()));
    this.#rebuild();
  }

  /** Each server's state, by name. */
  health(): Record<string, ServerHealth> {
    return Object.fromEntries(this.#connections.map((c) => [c.config.name, c.health()]));
  }

  /** Stops every server. Never throws. */
  async close(): Promise<void> {
    await Promise.all(this.#connections.map((connection) => connection.close()));
  }

  #rebuild(): void {
    const specs: ToolSpec[] = [];
    for (const connection of this.#connections) {
      for (const tool of connection.tools) {
        const server = connection.config.name;
        // Such a tool answers a plain call with an error (-32600): the client does not run MCP tasks.
        if (tool.execution?.taskSupport === "required") {
          this.#leaveOut(
            server,
            tool.name,
            "it requires task-based execution, which this client does not run",
          );
          continue;
        }
        const name = this.#names.add(server, tool.name);
        if (name === null) {
          this.#leaveOut(server, tool.name, "its name collides");
          continue;
        }
        specs.push(toolSpec(name, tool, connection));
      }
    }
    this.#specs = Object.freeze(specs);
    this.#version++;
  }

  #leaveOut(server: string, tool: string, why: string): void {
    const key = JSON.stringify([server, tool]);
    if (this.#leftOut.has(key)) return;
    this.#leftOut.add(key);
    this.#warn(`MCP tool "${tool}" of server "${server}" is left out: ${why}`);
  }
}

function toolSpec(name: string, listed: ListedTool, connection: Server): ToolSpec {
  const tool = listed.name;
  // Whether a call left running by a stopped process may run again: the server entry's `"safeToRepeat"`
  // says so for the tool, else its annotations (`readOnlyHint` or `idempotentHint` true).
  const overrides = connection.config.safeToRepeat ?? {};
  const hints = listed.annotations ?? {};
  return {
    name,
    description: listed.description ?? "",
    parameters: listed.inputSchema as JsonSchema,
    server: connection.config.name,
    safeToRepeat: Object.hasOwn(overrides, tool)
      ? overrides[tool]
      : hints.readOnlyHint === true || hints.idempotentHint === true,
    handler: async (args, context) => {
      const result = connection instanceof UserServers
        ? await connection.call(context.userId, tool, args, context.signal)
        : await connection.call(tool, args, context.signal);
      if (result.isError === true) {
        throw new Error(shorten(contentText(result) || "the server reported an error", MAX_ERROR_CHARS));
      }
      return toolData(result);
    },
  };
}

/** Starts the servers of `file` and lists their tools. Never rejects for a server problem. */
export async function startMcpTools(file: McpFile, options: McpToolsOptions): Promise<McpTools> {
  const tools = new McpTools(file, options);
  await tools.start();
  return tools;
}
