/** `/mcp` of serve: the agent as an MCP server, through the SDK's own client (Streamable HTTP). */
import assert from "node:assert/strict";
import {
  type ElicitRequest,
  ElicitRequestSchema,
  type Progress,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { McpEndpoint } from "../src/mcp/http_endpoint.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { runTurn } from "../src/agent/loop.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { freePort } from "../scripts/_bench_process.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, harness, lastToolResult, realTools, spawnServe, tempDir } from "./_harness.ts";
import { denoEnvironment } from "./_mcp_servers.ts";
import { type HttpHarness, httpHarness, until, withServer } from "./_http_harness.ts";

const sdk = await loadMcpSdk();
const TOKENS = [{ token: "tok-alice-0123456789", userId: "alice" }, {
  token: "tok-bob-0123456789",
  userId: "bob",
}];

/** A harness serving `/mcp`; `tokens` turn auth on. */
function mcpHarness(tokens = TOKENS): HttpHarness & { endpoint: McpEndpoint } {
  const h = httpHarness({ tokens });
  const endpoint = new McpEndpoint();
  h.deps.mcp = endpoint;
  return Object.assign(h, { endpoint });
}

/** Sends `/mcp` requests straight to the handler, as fetch would over the network. */
function handlerFetch(h: HttpHarness): typeof fetch {
  return (input, init) => h.handler(new Request(input, init));
}

/** A connected SDK client of `/mcp` with `token` (none: no header); `elicit` answers elicitation requests. */
async function connect(
  h: HttpHarness,
  token: string | null,
  elicit?: (message: string) => "accept" | "decline",
) {
  const capabilities = elicit === undefined ? {} : { elicitation: {} };
  const client = new sdk.Client({ name: "test", version: "1.0.0" }, { capabilities });
  if (elicit !== undefined) {
    client.setRequestHandler(ElicitRequestSchema, (request: ElicitRequest) => ({
      action: elicit(request.params.message),
    }));
  }
  const headers: Record<string, string> = token === null ? {} : { authorization: `Bearer ${token}` };
  const transport = new sdk.StreamableHTTPClientTransport(new URL("http://agent.test/mcp"), {
    requestInit: { headers },
    fetch: handlerFetch(h),
  });
  await client.connect(transport);
  return client;
}

type ToolResult = {
  content: { type: string; text: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};

async function call(
  client: Awaited<ReturnType<typeof connect>>,
  name: string,
  args: Record<string, unknown> = {},
): Promise<ToolResult> {
  return await client.callTool({ name, arguments: args }) as ToolResult;
}

Deno.test("/mcp: ask runs a turn and returns the answer with its tool calls; sessions and history list it", async () => {
  using h = mcpHarness();
  const client = await connect(h, TOKENS[0].token);
  try {
    const tools = await client.listTools();
    assert.deepEqual(tools.tools.map((t: { name: string }) => t.name), [
      "ask",
      "sessions",
      "session_history",
    ]);
    const answer = await call(client, "ask", { message: "what is 2+3?", session_id: "s1" });
    assert.equal(answer.isError, undefined);
    assert.equal(answer.content[0].text, "The answer is 5.");
    assert.equal(answer.structuredContent?.session_id, "s1");
    assert.equal(answer.structuredContent?.outcome, "answered");
    assert.deepEqual(answer.structuredContent?.tool_calls, [
      { name: "calculator", arguments: '{"expression":"2+3"}', ok: true },
    ]);
    const fresh = await call(client, "ask", { message: "hello" });
    assert.match(String(fresh.structuredContent?.session_id), /^mcp-/);
    assert.equal(fresh.content[0].text, "echo: hello");

    const sessions = await call(client, "sessions");
    const listed = sessions.structuredContent?.sessions as { id: string; title: string | null }[];
    assert.deepEqual(listed.map((s) => s.id).sort(), [fresh.structuredContent?.session_id, "s1"].sort());
    // Titles are the store's: named from each session's first question.
    assert.equal(listed.find((s) => s.id === "s1")?.title, "what is 2+3?");
    assert.equal(listed.find((s) => s.id === fresh.structuredContent?.session_id)?.title, "hello");
    const history = await call(client, "session_history", { session_id: "s1", last: 2 });
    const messages = history.structuredContent?.messages as { role: string; content: string }[];
    assert.deepEqual(messages.map((m) => m.role), ["tool", "assistant"]);
    assert.equal(messages[1].content, "The answer is 5.");
    assert.equal((await call(client, "session_history", { session_id: "s1", last: 0 })).isError, true);
    assert.equal((await call(client, "ask", { message: " " })).isError, true);
    assert.equal((await call(client, "ask", { message: "hi", session_id: "a/b" })).isError, true);

    const resources = await client.listResources();
    assert.ok(resources.resources.some((r: { uri: string }) => r.uri === "session://s1/todos"));
    const templates = await client.listResourceTemplates();
    assert.deepEqual(templates.resourceTemplates.map((t: { uriTemplate: string }) => t.uriTemplate), [
      "session://{id}/summary",
      "session://{id}/todos",
    ]);
    const summary = await client.readResource({ uri: "session://s1/summary" });
    assert.deepEqual(JSON.parse(String(summary.contents[0].text)), { session_id: "s1", summary: null });
    await call(client, "ask", { message: "add a todo", session_id: "s1" });
    const todos = await client.readResource({ uri: "session://s1/todos" });
    assert.deepEqual(JSON.parse(String(todos.contents[0].text)), { session_id: "s1", todos: [] });
    await assert.rejects(client.readResource({ uri: "session://nope/todos" }), /Resource not found/);
  } finally {
    await client.close();
    await h.endpoint.close();
  }
});

Deno.test("/mcp: two users' sessions are apart, a wrong token gets 401, and another user's MCP session 404", async () => {
  using h = mcpHarness();
  const alice = await connect(h, TOKENS[0].token);
  const bob = await connect(h, TOKENS[1].token);
  try {
    await call(alice, "ask", { message: "hello", session_id: "private" });
    const listed = await call(bob, "sessions");
    assert.deepEqual(listed.structuredContent?.sessions, []);
    const history = await call(bob, "session_history", { session_id: "private" });
    assert.equal(history.isError, true);
    assert.match(history.content[0].text, /not found/);
    await assert.rejects(bob.readResource({ uri: "session://private/summary" }), /Resource not found/);
    // Bob's answer on the same id is his own session.
    const own = await call(bob, "ask", { message: "mine", session_id: "private" });
    assert.equal(own.structuredContent?.session_id, "private");
    assert.equal((await h.store.messages({ userId: "alice", sessionId: "private" })).length, 2);

    await assert.rejects(connect(h, "tok-wrong-0123456789"), /401|Unauthorized/i);
    await assert.rejects(connect(h, null), /401|Unauthorized/i);
    const init = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
    };
    const refused = await h.handler(mcpPost(init, { authorization: "Bearer tok-wrong-0123456789" }));
    assert.equal(refused.status, 401);
    assert.equal(refused.headers.get("www-authenticate"), "Bearer");
    await refused.body?.cancel();

    // Alice's MCP session id with Bob's token: as unknown.
    const aliceSession = (alice.transport as { sessionId?: string }).sessionId!;
    const list = { jsonrpc: "2.0", id: 2, method: "tools/list" };
    const stolen = await h.handler(
      mcpPost(list, { authorization: `Bearer ${TOKENS[1].token}`, "mcp-session-id": aliceSession }),
    );
    assert.equal(stolen.status, 404);
    await stolen.body?.cancel();
  } finally {
    await alice.close();
    await bob.close();
    await h.endpoint.close();
  }
});

function mcpPost(
  body: unknown,
  headers: Record<string, string> = {},
  url = "http://agent.test/mcp",
): Request {
  return new Request(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

Deno.test("/mcp without tokens refuses another site's Host or Origin (DNS rebinding), and a body over the limit", async () => {
  using h = mcpHarness([]);
  const init = {
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
  };
  const host = await h.handler(mcpPost(init, {}, "http://evil.example/mcp"));
  assert.equal(host.status, 403);
  assert.equal((await host.json()).error.code, "host_not_allowed");
  const origin = await h.handler(mcpPost(init, { origin: "http://evil.example" }, "http://127.0.0.1/mcp"));
  assert.equal(origin.status, 403);
  assert.equal((await origin.json()).error.code, "origin_not_allowed");
  const ok = await h.handler(mcpPost(init, { origin: "http://127.0.0.1" }, "http://127.0.0.1/mcp"));
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
  const big = await h.handler(mcpPost({ ...init, padding: "x".repeat(70_000) }, {}, "http://127.0.0.1/mcp"));
  assert.equal(big.status, 413);
  await big.body?.cancel();
  const noSession = await h.handler(mcpPost({ jsonrpc: "2.0", id: 2, method: "tools/list" }));
  assert.equal(noSession.status, 400);
  await noSession.body?.cancel();
  assert.equal(h.endpoint.size, 1);
  await h.endpoint.close();
});

Deno.test("/mcp answers 404 saying how to turn it on when serve does not serve MCP", async () => {
  using h = httpHarness();
  const response = await h.handler(mcpPost({ jsonrpc: "2.0", id: 1, method: "initialize" }));
  assert.equal(response.status, 404);
  assert.match((await response.json()).error.message, /AGENT_SERVE_MCP=true/);
});

Deno.test("/mcp: ask with a progress token gets one progress notification per step", async () => {
  using h = mcpHarness();
  const client = await connect(h, TOKENS[0].token);
  try {
    const progress: { progress: number; message?: string }[] = [];
    const result = await client.callTool(
      { name: "ask", arguments: { message: "what is 6*7?", session_id: "p" } },
      undefined,
      { onprogress: (p: Progress) => progress.push({ progress: p.progress, message: p.message }) },
    ) as ToolResult;
    assert.equal(result.content[0].text, "The answer is 42.");
    assert.deepEqual(progress, [
      { progress: 1, message: "step 1: 1 tool call(s)" },
      { progress: 2, message: "step 2: answered" },
    ]);
  } finally {
    await client.close();
    await h.endpoint.close();
  }
});

Deno.test("/mcp: a cancelled ask aborts its turn like a disconnect, and takes back what it stored", async () => {
  using h = mcpHarness();
  const client = await connect(h, TOKENS[0].token);
  try {
    h.llm.hold = true;
    const controller = new AbortController();
    const asked = client.callTool(
      { name: "ask", arguments: { message: "hello", session_id: "c" } },
      undefined,
      { signal: controller.signal },
    );
    await until(() => h.llm.calls === 1, "the model call");
    controller.abort();
    await assert.rejects(asked, /abort/i);
    await until(() => h.llm.aborted === 1, "the model call aborted");
    await until(() => h.deps.sessions.active === 0, "the turn to end");
    assert.deepEqual(await h.store.messages({ userId: "alice", sessionId: "c" }), []);
  } finally {
    h.llm.release();
    await client.close();
    await h.endpoint.close();
  }
});

Deno.test("/mcp: a turn that needs approval asks through elicitation: accept approves, decline denies", async () => {
  using h = mcpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  const asked: string[] = [];
  let answer: "accept" | "decline" = "accept";
  const client = await connect(h, TOKENS[0].token, (message) => {
    asked.push(message);
    return answer;
  });
  try {
    const progress: number[] = [];
    const approved = await client.callTool(
      { name: "ask", arguments: { message: "what is 2+3?", session_id: "e1" } },
      undefined,
      { onprogress: (p: Progress) => progress.push(p.progress) },
    ) as ToolResult;
    assert.equal(approved.content[0].text, "The answer is 5.");
    // The run resumed after the approval counts its steps on: progress only grows.
    assert.deepEqual(progress, [1, 2]);
    assert.deepEqual(asked, [
      'The agent wants to run: calculator {"expression":"2+3"}. Accept to approve, decline to deny.',
    ]);
    answer = "decline";
    const denied = await call(client, "ask", { message: "what is 4+4?", session_id: "e2" });
    assert.equal(denied.structuredContent?.outcome, "answered");
    const messages = await h.store.messages({ userId: "alice", sessionId: "e2" });
    assert.match(String(messages.find((m) => m.role === "tool")?.content), /denied by the user/);
  } finally {
    await client.close();
    await h.endpoint.close();
  }
});

Deno.test("/mcp: without elicitation, a turn that needs approval answers that it waits and how to approve", async () => {
  using h = mcpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  const client = await connect(h, TOKENS[0].token);
  try {
    const waiting = await call(client, "ask", { message: "what is 2+3?", session_id: "w" });
    assert.equal(waiting.isError, undefined);
    assert.equal(waiting.structuredContent?.outcome, "awaiting_approval");
    assert.match(waiting.content[0].text, /waits for approval of calculator/);
    assert.match(waiting.content[0].text, /POST \/v1\/sessions\/w\/approvals/);
    const again = await call(client, "ask", { message: "and now?", session_id: "w" });
    assert.equal(again.isError, true);
    assert.match(again.content[0].text, /waiting for approval/);
    // The route the answer names resumes the turn.
    const decided = await h.handler(
      new Request("http://agent.test/v1/sessions/w/approvals", {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKENS[0].token}` },
        body: JSON.stringify({ decisions: { call_1: "approve" } }),
      }),
    );
    assert.equal((await decided.json()).answer, "The answer is 5.");
  } finally {
    await client.close();
    await h.endpoint.close();
  }
});

Deno.test("the runtime's own MCP client reaches /mcp of another agent with a static bearer token from headers, and is refused without", async () => {
  using h = mcpHarness();
  using inner = harness([
    { toolCalls: [{ name: "agent__ask", arguments: { message: "what is 2+3?" } }] },
    { content: "done" },
  ]);
  await withServer(h, async ({ url }) => {
    const entry = (headers: Record<string, string>) => ({
      path: "mcp.json",
      servers: [{ name: "agent", transport: "http" as const, url: `${url}/mcp`, headers }],
      approval: undefined,
    });
    const warnings: string[] = [];
    const refused = await startMcpTools(entry({}), {
      sdk,
      timeoutMs: 20_000,
      warn: (line) => warnings.push(line),
    });
    try {
      assert.equal(refused.health().agent.state, "failed");
      assert.match(warnings.join("\n"), /401|Unauthorized/i);
    } finally {
      await refused.close();
    }
    const authorization = `Bearer ${TOKENS[0].token}`;
    const mcp = await startMcpTools(entry({ Authorization: authorization }), {
      sdk,
      timeoutMs: 20_000,
      warn: () => {},
    });
    try {
      inner.agent.tools = realTools(inner.store, [], [mcp]);
      const result = await runTurn({ userId: "u", sessionId: "s", message: "go" }, inner.agent, inner.run);
      assert.equal(result.outcome, "answered");
      const asked = lastToolResult(inner.llm.requests[1].messages);
      assert.equal(asked.ok, true);
      assert.match(JSON.stringify(asked.data), /The answer is 5\./);
      assert.equal((await h.store.listSessions("alice")).length, 1);
    } finally {
      await mcp.close();
    }
  });
});

Deno.test("/mcp over loopback: a client that disconnects from its ask aborts the turn", async () => {
  using h = mcpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${TOKENS[0].token}`,
    };
    const post = (body: unknown, extra: Record<string, string> = {}, signal?: AbortSignal) =>
      fetch(`${url}/mcp`, {
        method: "POST",
        headers: { ...headers, ...extra },
        body: JSON.stringify(body),
        signal,
      });
    const init = await post({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
    });
    const session = {
      "mcp-session-id": init.headers.get("mcp-session-id")!,
      "mcp-protocol-version": "2025-06-18",
    };
    await init.body?.cancel();
    await (await post({ jsonrpc: "2.0", method: "notifications/initialized" }, session)).body?.cancel();
    const controller = new AbortController();
    const call = {
      jsonrpc: "2.0",
      id: 2,
      method: "tools/call",
      params: { name: "ask", arguments: { message: "hello", session_id: "gone" } },
    };
    const asked = post(call, session, controller.signal);
    await until(() => h.llm.calls === 1, "the model call");
    controller.abort();
    // The SSE response's headers may have come already: its body is then cut, else the request.
    await asked.then((response) => response.body?.cancel(), () => {}).catch(() => {});
    await until(() => h.llm.aborted === 1, "the model call aborted");
    await until(() => h.deps.sessions.active === 0, "the turn to end");
    assert.deepEqual(await h.store.messages({ userId: "alice", sessionId: "gone" }), []);
  });
});

Deno.test("deno task serve with AGENT_SERVE_MCP=1 serves /mcp under its task flags, and stops with a client connected", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const port = freePort();
  const token = "tok-alice-0123456789";
  const env = childEnv(dir.path, {
    ...denoEnvironment(),
    AGENT_PORT: String(port),
    OPENAI_BASE_URL: provider.url,
    AGENT_API_TOKENS: `${token}:alice`,
    AGENT_SERVE_MCP: "1",
  });
  const serve = spawnServe(["task", "serve"], env);
  try {
    await serve.listening;
    assert.match(serve.stderr(), /MCP at \/mcp/);
    const client = new sdk.Client({ name: "test", version: "1.0.0" });
    const transport = new sdk.StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    });
    await client.connect(transport);
    const answer = await client.callTool({
      name: "ask",
      arguments: { message: "what is 12*(3+4)?" },
    }) as ToolResult;
    assert.equal(answer.content[0].text, "The answer is 84.");
    assert.equal(await serve.stop(), 0, serve.stderr());
    await client.close();
  } finally {
    await serve.stop();
    await provider.close();
  }
});

Deno.test("/mcp keeps at most maxSessions MCP sessions: one more closes the one used least recently", async () => {
  using h = httpHarness({ tokens: TOKENS });
  const endpoint = new McpEndpoint({ maxSessions: 2 });
  h.deps.mcp = endpoint;
  const first = await connect(h, TOKENS[0].token);
  const second = await connect(h, TOKENS[0].token);
  try {
    await first.listTools(); // now the second is the one used least recently
    const third = await connect(h, TOKENS[1].token);
    assert.equal(endpoint.size, 2);
    await first.listTools();
    await third.listTools();
    await assert.rejects(second.listTools(), /404|Session not found/i);
    await third.close();
  } finally {
    await first.close();
    await second.close().catch(() => {});
    await endpoint.close();
  }
  assert.throws(() => new McpEndpoint({ maxSessions: 0 }), RangeError);
});
