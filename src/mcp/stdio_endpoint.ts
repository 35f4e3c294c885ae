/**
 * `deno task mcp`: the agent's MCP server over stdio, for a desktop client's `mcpServers` entry. stdout
 * carries the protocol alone; every log line goes to stderr.
 * @module
 */
import process from "node:process";
import type { Readable, Writable } from "node:stream";
import { type AgentServerDeps, createAgentServer } from "./agent_server.ts";
import { loadMcpServerSdk, type McpServerSdk } from "./sdk.ts";

/** Options of {@linkcode serveMcpStdio}. */
export interface StdioEndpointOptions {
  /** The user every session belongs to. Required. */
  userId: string;
  /** Where requests come from. @default {process.stdin} */
  input?: Readable;
  /** Where answers go. @default {process.stdout} */
  output?: Writable;
  /** Stops the server (the process's signals). @default {undefined} */
  signal?: AbortSignal;
  /** @default {loadMcpServerSdk} */
  loadSdk?: () => Promise<McpServerSdk>;
}

/**
 * Serves the agent over `input`/`output` as `userId` until the client closes `input` or `signal` aborts;
 * then aborts the turns still running (nobody is left to answer: each is taken back) and resolves once they
 * ended. Rejects when the SDK cannot be loaded.
 */
export async function serveMcpStdio(
  deps: Omit<AgentServerDeps, "shutdownSignal">,
  options: StdioEndpointOptions,
): Promise<void> {
  const { userId, input = process.stdin, output = process.stdout, signal, loadSdk = loadMcpServerSdk } =
    options;
  const sdk = await loadSdk();
  const approveHint = (sessionId: string) => {
    const user = userId === "local" ? "" : ` --user ${userId}`;
    return `Decide in chat: deno task chat --session ${sessionId}${user} shows the waiting calls and asks.`;
  };
  const turns = new AbortController();
  const running = new Set<Promise<unknown>>();
  const track = (call: Promise<unknown>) => {
    running.add(call);
    call.finally(() => running.delete(call)).catch(() => {});
  };
  const server = createAgentServer(sdk, userId, { ...deps, shutdownSignal: turns.signal }, {
    approveHint,
    track,
  });
  const closed = new Promise<void>((resolve) => (server.onclose = resolve));
  const close = () => void server.close().catch(() => {});
  // The client went: its stdin ends.
  input.once("end", close);
  signal?.addEventListener("abort", close, { once: true });
  try {
    await server.connect(new sdk.StdioServerTransport(input, output));
    await closed;
  } finally {
    input.off("end", close);
    signal?.removeEventListener("abort", close);
    turns.abort();
    await Promise.allSettled(running);
  }
}
