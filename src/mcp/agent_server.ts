/**
 * The agent as an MCP server for one user: the tools `ask` (one turn), `sessions` and `session_history`, and
 * each session's `session://{id}/summary` and `session://{id}/todos` as resources. The transports around it
 * are `http_endpoint.ts` (`/mcp` of `serve`) and `stdio_endpoint.ts` (`deno task mcp`).
 * @module
 */
import type { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server/index.js";
import type { RequestHandlerExtra } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/protocol.js";
import type {
  CallToolRequest,
  CallToolResult,
  ReadResourceRequest,
  ServerNotification,
  ServerRequest,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import type { EventSink, RunEvent } from "../events.ts";
import { QueueFullError, QuotaExceededError, SessionError, StoreUnavailableError } from "../errors.ts";
import { parseSummary } from "../memory/summary.ts";
import { type SessionKey, type SessionStore, validateId } from "../store/store.ts";
import { isValidId, type TurnResult } from "../types.ts";
import { messageJson, sessionListItem, todoJson } from "../session/session_json.ts";
import { failureMessage } from "../session/failure.ts";
import { queueTurn, type TurnDeps } from "../session/turn.ts";
import type { McpServerSdk } from "./sdk.ts";

/** What the server runs turns with and reports to. */
export interface AgentServerDeps extends TurnDeps {
  /** Where the sessions are kept: the turns', and what the tools and resources read. */
  store: SessionStore;
  /** Receives every run event (the trace). */
  emit: EventSink;
  /** Unexpected errors, one line each. Never receives tokens or message text. */
  log(line: string): void;
}

/** Options of {@linkcode createAgentServer}. */
export interface AgentServerOptions {
  /**
   * What a client that cannot answer an elicitation is told to do to decide on the waiting calls of a
   * session. Required.
   */
  approveHint: (sessionId: string) => string;
  /** Receives each tool call's work as it starts, to wait for it on close. @default {undefined} */
  track?: (call: Promise<unknown>) => void;
}

/** Messages `session_history` returns when the client names no number. */
const HISTORY_DEFAULT = 20;
/** The most messages one `session_history` call returns. */
const HISTORY_MAX = 200;
/**
 * How a client runs a failed turn's saved message again: `ask` can only send a message, and sending it again
 * would store it twice.
 */
const RETRY = 'ask again with "retry": true and the same session_id';
/** The error code of an unknown resource (MCP's). */
const RESOURCE_NOT_FOUND = -32002;

const TOOLS = [
  {
    name: "ask",
    title: "Ask the agent",
    description:
      "Runs one turn of the agent on a session (a new one unless session_id is given) and returns " +
      "its answer; structuredContent holds the session id, outcome and the tool calls the agent made.",
    inputSchema: {
      type: "object",
      properties: {
        message: { type: "string", description: "The user's message; required unless retry is true." },
        session_id: {
          type: "string",
          description: "The session to continue (1-128 letters, digits and . _ : -); omitted: a new one.",
        },
        retry: {
          type: "boolean",
          default: false,
          description:
            "True: run the session's unanswered message again (after a failed turn) instead of a new one; " +
            "needs session_id, reads no message.",
        },
      },
    },
  },
  {
    name: "sessions",
    title: "List sessions",
    description: "Lists the caller's sessions: id, title, turn count, last update.",
    inputSchema: { type: "object", properties: {} },
  },
  {
    name: "session_history",
    title: "Session history",
    description: "The last messages of one of the caller's sessions, oldest first.",
    inputSchema: {
      type: "object",
      properties: {
        session_id: { type: "string", description: "The session." },
        last: {
          type: "integer",
          minimum: 1,
          maximum: HISTORY_MAX,
          default: HISTORY_DEFAULT,
          description:
            `How many of the newest messages (default ${HISTORY_DEFAULT}, at most ${HISTORY_MAX}).`,
        },
      },
      required: ["session_id"],
    },
  },
];

const KINDS = {
  summary: "what compaction kept of the session's older turns (JSON; null before the first compaction)",
  todos: "the session's todo list (JSON)",
} as const;

/** What a tool handler receives of its request besides the arguments: its signal, progress token, replies. */
type CallContext = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * A server (not yet connected to a transport) answering as `userId`: every tool and resource works on that
 * user's sessions only. A tool problem (a bad argument, a failed turn, a full queue) is a tool result with
 * `isError`, never a protocol error; an unknown resource is the protocol's -32002.
 */
export function createAgentServer(
  sdk: McpServerSdk,
  userId: string,
  deps: AgentServerDeps,
  options: AgentServerOptions,
): Server {
  const { approveHint, track } = options;
  const { types } = sdk;
  const { store } = deps;
  const server = new sdk.Server({ name: "mini-agent", version: "1.0.0" }, {
    capabilities: { tools: {}, resources: {} },
    instructions:
      "Call `ask` to put a question to the agent; pass the session_id it returns to go on in the " +
      "same conversation.",
  });
  const newId = deps.agent.newId ?? (() => crypto.randomUUID());

  /**
   * Runs a queued turn, relaying each step as a progress notification when the client asked for them, counted
   * on from `progress.steps` (a run resumed after approval goes on from its first part); resolves once every
   * notification is on its way, so none comes after the result.
   */
  const run = async (
    queued: ReturnType<typeof queueTurn>,
    context: CallContext,
    progress: { steps: number },
  ): Promise<TurnResult> => {
    const progressToken = context._meta?.progressToken;
    const sent: Promise<void>[] = [];
    const result = await (await queued)((event: RunEvent) => {
      deps.emit(event);
      if (progressToken === undefined || event.event !== "llm_call") return;
      const steps = ++progress.steps;
      const calls = event.data.tool_call_count;
      const message = calls === 0 ? `step ${steps}: answered` : `step ${steps}: ${calls} tool call(s)`;
      const params = { progressToken, progress: steps, message };
      sent.push(context.sendNotification({ method: "notifications/progress", params }).catch(() => {}));
    });
    await Promise.all(sent);
    return result;
  };

  /** "approve" or "deny" from the client through elicitation, or null when it cannot or will not say. */
  const elicit = async (result: TurnResult, context: CallContext): Promise<"approve" | "deny" | null> => {
    if (server.getClientCapabilities()?.elicitation === undefined) return null;
    const calls = (result.approval?.calls ?? []).map((call) => `${call.name} ${call.arguments}`).join("; ");
    try {
      const reply = await context.sendRequest(
        {
          method: "elicitation/create",
          params: {
            message: `The agent wants to run: ${calls}. Accept to approve, decline to deny.`,
            requestedSchema: { type: "object", properties: {} },
          },
        },
        types.ElicitResultSchema,
        { signal: context.signal },
      );
      return reply.action === "accept" ? "approve" : reply.action === "decline" ? "deny" : null;
    } catch (error) {
      if (context.signal.aborted) throw error;
      return null;
    }
  };

  const ask = async (args: Record<string, unknown>, context: CallContext): Promise<CallToolResult> => {
    const { message, retry = false } = args;
    if (typeof retry !== "boolean") return toolError('Cannot ask: "retry" must be a boolean');
    if (retry && args.session_id === undefined) {
      return toolError('Cannot retry: "session_id" must name the session whose message to run again');
    }
    if (!retry && (typeof message !== "string" || message.trim() === "")) {
      return toolError('Cannot ask: "message" must be a non-empty string');
    }
    const sessionId = args.session_id === undefined ? `mcp-${newId()}` : validateId(args.session_id);
    const key: SessionKey = { userId, sessionId };
    const asked = retry ? { ...key, retry } : { ...key, message: message as string };
    const progress = { steps: 0 };
    let result: TurnResult;
    try {
      result = await run(queueTurn(context.signal, asked, deps), context, progress);
    } catch (error) {
      if (!(error instanceof SessionError) || error.reason !== "approval_pending") throw error;
      return toolError(`${error.message}. ${approveHint(sessionId)}`);
    }
    while (result.outcome === "awaiting_approval") {
      const decision = await elicit(result, context);
      if (decision === null) return waiting(result, approveHint(sessionId));
      const calls = result.approval?.calls ?? [];
      const input = { ...key, decisions: Object.fromEntries(calls.map((call) => [call.id, decision])) };
      result = await run(queueTurn(context.signal, input, deps), context, progress);
    }
    if (result.failure !== undefined) {
      return toolError(failureMessage({ ...result, failure: result.failure }, { retry: RETRY }));
    }
    const { runId: run_id, turn, outcome, answer, toolCalls: tool_calls } = result;
    return {
      content: [{ type: "text", text: answer }],
      structuredContent: { session_id: sessionId, run_id, turn, outcome, answer, tool_calls },
    };
  };

  const sessions = async (): Promise<CallToolResult> =>
    json({ sessions: (await store.listSessions(userId)).map(sessionListItem) });

  const history = async (args: Record<string, unknown>): Promise<CallToolResult> => {
    const sessionId = validateId(args.session_id);
    const { last = HISTORY_DEFAULT } = args;
    if (typeof last !== "number" || !Number.isInteger(last) || last < 1 || last > HISTORY_MAX) {
      return toolError(`Cannot read the history: "last" must be an integer from 1 to ${HISTORY_MAX}`);
    }
    const key = { userId, sessionId };
    if (await store.get(key) === null) return toolError(`Session "${sessionId}" not found`);
    const messages = (await store.messages(key)).slice(-last).map(messageJson);
    return json({ session_id: sessionId, messages });
  };

  server.setRequestHandler(types.ListToolsRequestSchema, () => ({ tools: TOOLS }));
  const call = async (request: CallToolRequest, extra: CallContext): Promise<CallToolResult> => {
    const args = (request.params.arguments ?? {}) as Record<string, unknown>;
    try {
      switch (request.params.name) {
        case "ask":
          return await ask(args, extra);
        case "sessions":
          return await sessions();
        case "session_history":
          return await history(args);
        default:
          return toolError(
            `Unknown tool "${request.params.name}": expected ask, sessions or session_history`,
          );
      }
    } catch (error) {
      return toolError(refusal(error, deps.log));
    }
  };
  server.setRequestHandler(types.CallToolRequestSchema, (request: CallToolRequest, extra: CallContext) => {
    const work = call(request, extra);
    track?.(work);
    return work;
  });

  server.setRequestHandler(types.ListResourcesRequestSchema, async () => {
    const resources = (await store.listSessions(userId)).flatMap((session) =>
      (Object.keys(KINDS) as (keyof typeof KINDS)[]).map((kind) => ({
        uri: `session://${session.id}/${kind}`,
        name: `${session.id} ${kind}`,
        description: `Session "${session.id}": ${KINDS[kind]}`,
        mimeType: "application/json",
      }))
    );
    return { resources };
  });
  server.setRequestHandler(types.ListResourceTemplatesRequestSchema, () => ({
    resourceTemplates: (Object.keys(KINDS) as (keyof typeof KINDS)[]).map((kind) => ({
      uriTemplate: `session://{id}/${kind}`,
      name: `session ${kind}`,
      description: `A session's ${KINDS[kind]}`,
      mimeType: "application/json",
    })),
  }));
  server.setRequestHandler(types.ReadResourceRequestSchema, async (request: ReadResourceRequest) => {
    const { uri } = request.params;
    const notFound = () => new types.McpError(RESOURCE_NOT_FOUND, `Resource not found: ${uri}`, { uri });
    const match = /^session:\/\/([^/]+)\/(summary|todos)$/.exec(uri);
    if (match === null) throw notFound();
    const key = { userId, sessionId: match[1] };
    const session = isValidId(key.sessionId) ? await store.get(key) : null;
    if (session === null) throw notFound();
    const body = match[2] === "summary"
      ? { session_id: session.id, summary: parseSummary(session.summary) }
      : {
        session_id: session.id,
        todos: (await store.listTodos(key)).map(todoJson),
      };
    return { contents: [{ uri, mimeType: "application/json", text: JSON.stringify(body) }] };
  });
  return server;
}

function toolError(text: string): CallToolResult {
  return { content: [{ type: "text", text }], isError: true };
}

function json(value: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text: JSON.stringify(value) }], structuredContent: value };
}

/** The answer of a turn that waits for approval nobody gave here: what waits, and how to decide. */
function waiting(result: TurnResult, hint: string): CallToolResult {
  const calls = result.approval?.calls ?? [];
  const text = `The turn waits for approval of ${calls.map((c) => `${c.name} ${c.arguments}`).join("; ")}. ` +
    hint;
  return {
    content: [{ type: "text", text }],
    structuredContent: {
      session_id: result.sessionId,
      run_id: result.runId,
      turn: result.turn,
      outcome: result.outcome,
      approval: { calls },
    },
  };
}

/**
 * A thrown value as a tool error's text: the words of what refused the call (a session, the daily quota, a
 * full queue, an unreachable store), a cancelled request's, else logged and "Internal error".
 */
function refusal(error: unknown, log: (line: string) => void): string {
  const known = [SessionError, QuotaExceededError, QueueFullError, StoreUnavailableError];
  if (known.some((type) => error instanceof type)) return (error as Error).message;
  if (error instanceof DOMException && error.name === "AbortError") return "The request was cancelled";
  log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  return "Internal error";
}
