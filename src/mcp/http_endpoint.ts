/**
 * `/mcp` of `serve`: the agent's MCP server over Streamable HTTP, the SDK's web-standard transport behind the
 * handler's own checks (host guard, bearer token, the body read under its limit). Each MCP session belongs to the user whose
 * token opened it; the SDK is loaded on the first request.
 * @module
 */
import type { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server/index.js";
import type { WebStandardStreamableHTTPServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp.js";
import { errorMessage } from "../errors.ts";
import { type AgentServerDeps, createAgentServer } from "./agent_server.ts";
import { loadMcpServerSdk, type McpServerSdk } from "./sdk.ts";

/** Options of {@linkcode McpEndpoint}. */
export interface McpEndpointOptions {
  /** Loads the SDK, on the first request. @default {loadMcpServerSdk} */
  loadSdk?: () => Promise<McpServerSdk>;
  /** MCP sessions kept at once; one more closes the one used least recently. @default {256} */
  maxSessions?: number;
}

/** One MCP session: the user it belongs to, its transport and its server. */
interface McpSession {
  userId: string;
  transport: WebStandardStreamableHTTPServerTransport;
  server: Server;
}

/** The MCP sessions of `/mcp` and the requests to them. */
export class McpEndpoint {
  readonly #options: Required<McpEndpointOptions>;
  #sdk: Promise<McpServerSdk> | null = null;
  /** By session id, the one used least recently first. */
  readonly #sessions = new Map<string, McpSession>();

  /** @throws {RangeError} when `maxSessions` is not a positive integer */
  constructor(options: McpEndpointOptions = {}) {
    const { loadSdk = loadMcpServerSdk, maxSessions = 256 } = options;
    if (!Number.isInteger(maxSessions) || maxSessions < 1) {
      throw new RangeError(`Cannot serve MCP: maxSessions must be a positive integer, got ${maxSessions}`);
    }
    this.#options = { loadSdk, maxSessions };
  }

  /** MCP sessions open now. */
  get size(): number {
    return this.#sessions.size;
  }

  /**
   * Answers a POST, GET or DELETE of `/mcp` from `userId` (authenticated by the caller, who read a POST's
   * `body` under the body limit), a new session's turns run with `deps`. A request without `Mcp-Session-Id`
   * may only initialize a session (else 400); a session id unknown, or of another user, is a 404 (the client
   * then initializes again); 503 while the SDK cannot be loaded. A client that disconnects from a POST
   * cancels its request, as `notifications/cancelled` would.
   */
  async handle(request: Request, userId: string, deps: AgentServerDeps, body?: unknown): Promise<Response> {
    let sdk: McpServerSdk;
    try {
      sdk = await this.#sdkLoaded();
    } catch (error) {
      return rpcError(503, -32603, `Cannot serve MCP: the MCP SDK cannot be loaded (${errorMessage(error)})`);
    }
    const id = request.headers.get("mcp-session-id");
    let session: McpSession;
    if (id === null) {
      if (request.method !== "POST" || !sdk.types.isInitializeRequest(body)) {
        return rpcError(
          400,
          -32000,
          "Bad Request: no Mcp-Session-Id header; start with an initialize request",
        );
      }
      session = await this.#open(sdk, userId, deps);
    } else {
      const found = this.#sessions.get(id);
      if (found === undefined || found.userId !== userId) return rpcError(404, -32001, "Session not found");
      this.#sessions.delete(id);
      this.#sessions.set(id, found);
      session = found;
    }
    cancelOnDisconnect(request, body, session.transport);
    return await session.transport.handleRequest(request, { parsedBody: body });
  }

  /** Ends every session's standalone stream (`GET /mcp`), so a shutdown waits only for running calls. */
  closeStreams(): void {
    for (const { transport } of this.#sessions.values()) transport.closeStandaloneSSEStream();
  }

  /** Closes every session. */
  async close(): Promise<void> {
    const sessions = [...this.#sessions.values()];
    this.#sessions.clear();
    await Promise.all(sessions.map(({ server }) => server.close().catch(() => {})));
  }

  /** The SDK, loaded once; a load that failed is forgotten, so the next request tries again. */
  #sdkLoaded(): Promise<McpServerSdk> {
    this.#sdk ??= this.#options.loadSdk().catch((error) => {
      this.#sdk = null;
      throw error;
    });
    return this.#sdk;
  }

  /** A new session of `userId`, kept once its initialize request succeeds. */
  async #open(sdk: McpServerSdk, userId: string, deps: AgentServerDeps): Promise<McpSession> {
    const server = createAgentServer(sdk, userId, deps, { approveHint });
    const transport: WebStandardStreamableHTTPServerTransport = new sdk
      .WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      onsessioninitialized: (id: string) => {
        this.#sessions.set(id, session);
        if (this.#sessions.size > this.#options.maxSessions) {
          const [oldest, entry] = this.#sessions.entries().next().value!;
          this.#sessions.delete(oldest);
          entry.server.close().catch(() => {});
        }
      },
      onsessionclosed: (id: string) => {
        this.#sessions.delete(id);
      },
    });
    const session = { userId, transport, server };
    await server.connect(transport);
    return session;
  }
}

/** How an HTTP client decides on a waiting turn without elicitation. */
function approveHint(sessionId: string): string {
  return `Decide with POST /v1/sessions/${sessionId}/approvals and the same token, body ` +
    '{"decisions": {"<call id>": "approve" or "deny"}} (the ids are in structuredContent.approval.calls).';
}

/** A client gone from its POST cancels that request: the SDK aborts the handler's signal, and so the turn. */
function cancelOnDisconnect(
  request: Request,
  body: unknown,
  transport: WebStandardStreamableHTTPServerTransport,
): void {
  const message = body as { method?: unknown; id?: unknown } | undefined;
  if (
    typeof message?.method !== "string" || (typeof message.id !== "string" && typeof message.id !== "number")
  ) {
    return;
  }
  const requestId = message.id;
  request.signal.addEventListener("abort", () => {
    transport.onmessage?.({
      jsonrpc: "2.0",
      method: "notifications/cancelled",
      params: { requestId, reason: "the client disconnected" },
    });
  }, { once: true });
}

/** A JSON-RPC error response without an id, as the transport writes its own. */
function rpcError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: "2.0", error: { code, message }, id: null }, { status });
}
