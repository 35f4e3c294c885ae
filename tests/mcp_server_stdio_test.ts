/**
 * `deno task mcp`: the agent's MCP server over stdio, started from the Claude Desktop entry of docs/mcp.md as a
 * desktop client starts it (the SDK's default environment plus the entry's), and driven by the SDK's own
 * client over the runtime's stdio transport (the SDK's leaves a timer behind on close).
 */
import assert from "node:assert/strict";
import { Client } from "npm:@modelcontextprotocol/sdk@1.32.2/client/index.js";
import { getDefaultEnvironment } from "npm:@modelcontextprotocol/sdk@1.32.2/client/stdio.js";
import { DenoStdioTransport } from "../src/mcp/stdio_transport.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { ROOT, tempDir } from "./_harness.ts";
import { PassThrough } from "node:stream";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { serveMcpStdio } from "../src/mcp/stdio_endpoint.ts";
import { type HttpHarness, httpHarness, until } from "./_http_harness.ts";
import { denoEnvironment } from "./_mcp_servers.ts";

const DOCS = new URL("../docs/mcp.md", import.meta.url);

/** The first JSON block after `heading` in docs/mcp.md, parsed. */
function documentedEntry(heading: string): Record<string, unknown> {
  const text = Deno.readTextFileSync(DOCS);
  const after = text.slice(text.indexOf(`\n${heading}\n`));
  const block = /```json\n([\s\S]*?)\n```/.exec(after);
  assert.ok(block !== null, `docs/mcp.md has a JSON block after ${heading}`);
  return JSON.parse(block[1]);
}

type Entry = { type?: string; command: string; args: string[]; env: Record<string, string> };

type ToolResult = {
  content: { type: string; text: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
};

/** What the agent started over stdio needs of a test: the Deno cache, its model, and `dir` for its data. */
function agentEnvironment(dir: string, model: string): Record<string, string> {
  return {
    ...denoEnvironment(),
    OPENAI_BASE_URL: model,
    AGENT_DB_PATH: `${dir}/db/sessions.db`,
    AGENT_TRACE_PATH: `${dir}/trace/traces.jsonl`,
  };
}

Deno.test("docs/mcp.md's Claude Desktop and VS Code entries run deno task mcp in the repository", () => {
  const desktop = (documentedEntry("### Claude Desktop").mcpServers as Record<string, Entry>)["mini-agent"];
  const vscode = (documentedEntry("### VS Code").servers as Record<string, Entry>)["mini-agent"];
  assert.equal(desktop.command, "deno");
  assert.deepEqual(desktop.args, ["task", "--quiet", "--cwd", "/path/to/mini-runtime-agent", "mcp"]);
  assert.deepEqual(Object.keys(desktop.env), ["OPENAI_API_KEY"]);
  assert.deepEqual(vscode, { type: "stdio", ...desktop });
});

Deno.test("the documented Claude Desktop entry starts the agent over stdio: ask, progress, sessions, history, resources", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const entry = (documentedEntry("### Claude Desktop").mcpServers as Record<string, Entry>)["mini-agent"];
  const args = entry.args.map((arg) => arg === "/path/to/mini-runtime-agent" ? ROOT : arg);
  // As the desktop client starts it: the variables it passes on, then the entry's env; then this test's
  // model, data folder and Deno cache.
  const env = {
    ...getDefaultEnvironment(),
    ...entry.env,
    ...agentEnvironment(dir.path, provider.url),
    NO_COLOR: "1",
  };
  const transport = new DenoStdioTransport({ command: entry.command, args, env });
  const client = new Client({ name: "desktop", version: "1.0.0" });
  // A line on stdout that is not the protocol (a log line) would be reported here, as skipped.
  const errors: Error[] = [];
  client.onerror = (error: Error) => errors.push(error);
  try {
    await client.connect(transport);
    // What the server sent, read off the transport: the SDK client hands a progress notification to its
    // callback a microtask late, after the response that follows it in the same read has removed it.
    const progress: number[] = [];
    const receive = transport.onmessage!;
    transport.onmessage = (message) => {
      if ("method" in message && message.method === "notifications/progress") {
        progress.push((message.params as { progress: number }).progress);
      }
      receive(message);
    };
    const asked = await client.callTool(
      { name: "ask", arguments: { message: "what is 12*(3+4)?", session_id: "desk" } },
      undefined,
      { onprogress: () => {} },
    ) as ToolResult;
    assert.equal(asked.content[0].text, "The answer is 84.");
    assert.equal(asked.structuredContent?.session_id, "desk");
    assert.deepEqual(progress, [1, 2]);
    const sessions = await client.callTool({ name: "sessions", arguments: {} }) as ToolResult;
    assert.deepEqual((sessions.structuredContent?.sessions as { id: string }[]).map((s) => s.id), ["desk"]);
    const history = await client.callTool({
      name: "session_history",
      arguments: { session_id: "desk", last: 1 },
    }) as ToolResult;
    assert.deepEqual(history.structuredContent?.messages, [
      (history.structuredContent?.messages as unknown[])[0],
    ]);
    assert.equal(
      (history.structuredContent?.messages as { content: string }[])[0].content,
      "The answer is 84.",
    );
    const todos = await client.readResource({ uri: "session://desk/todos" });
    assert.deepEqual(JSON.parse(String(todos.contents[0].text)), { session_id: "desk", todos: [] });
    assert.deepEqual(errors.filter((error) => /skipped|bytes/.test(error.message)), []);
  } finally {
    await client.close();
    await provider.close();
  }
});

Deno.test("deno task mcp --user keeps that user's sessions apart from the local user's", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const env = { ...getDefaultEnvironment(), ...agentEnvironment(dir.path, provider.url) };
  const start = async (user: string[]) => {
    const transport = new DenoStdioTransport({
      command: "deno",
      args: ["task", "--quiet", "--cwd", ROOT, "mcp", ...user],
      env,
    });
    const client = new Client({ name: "desktop", version: "1.0.0" });
    await client.connect(transport);
    return client;
  };
  try {
    const alice = await start(["--user", "alice"]);
    try {
      await alice.callTool({ name: "ask", arguments: { message: "hello", session_id: "a1" } });
    } finally {
      await alice.close();
    }
    const local = await start([]);
    try {
      const sessions = await local.callTool({ name: "sessions", arguments: {} }) as ToolResult;
      assert.deepEqual(sessions.structuredContent?.sessions, []);
      const history = await local.callTool({
        name: "session_history",
        arguments: { session_id: "a1" },
      }) as ToolResult;
      assert.equal(history.isError, true);
    } finally {
      await local.close();
    }
  } finally {
    await provider.close();
  }
});

Deno.test("deno task mcp: a cancelled ask aborts its turn and takes back what it stored", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  let release!: () => void;
  provider.hold = new Promise((resolve) => (release = resolve));
  const env = { ...getDefaultEnvironment(), ...agentEnvironment(dir.path, provider.url) };
  const transport = new DenoStdioTransport({
    command: "deno",
    args: ["task", "--quiet", "--cwd", ROOT, "mcp"],
    env,
  });
  const client = new Client({ name: "desktop", version: "1.0.0" });
  try {
    await client.connect(transport);
    const controller = new AbortController();
    const asked = client.callTool(
      { name: "ask", arguments: { message: "hello", session_id: "c" } },
      undefined,
      { signal: controller.signal },
    );
    await until(() => provider.requests.length === 1, "the model call");
    controller.abort();
    await assert.rejects(asked, /abort/i);
    // The turn's question is taken back once the abort reaches it.
    let messages: unknown[] = [null];
    for (let tries = 0; messages.length > 0 && tries < 100; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      const history = await client.callTool({
        name: "session_history",
        arguments: { session_id: "c" },
      }) as ToolResult;
      messages = history.structuredContent?.messages as unknown[];
    }
    assert.deepEqual(messages, []);
  } finally {
    release();
    await client.close();
    await provider.close();
  }
});

/** serveMcpStdio() on in-process streams over a handler harness's deps: what it wrote, line by line. */
function servedOverStreams(h: HttpHarness, userId = "local") {
  const input = new PassThrough();
  const output = new PassThrough();
  const received: Record<string, unknown>[] = [];
  let pending = "";
  output.on("data", (chunk: Uint8Array) => {
    pending += new TextDecoder().decode(chunk);
    const lines = pending.split("\n");
    pending = lines.pop()!;
    received.push(...lines.map((line) => JSON.parse(line)));
  });
  const { agent, store, emit, sessions } = h.deps;
  const served = serveMcpStdio({ agent, store, emit, sessions, log: () => {} }, { userId, input, output });
  const send = (message: Record<string, unknown>) =>
    input.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
  const answer = async (id: number) => {
    await until(() => received.some((m) => m.id === id), `the answer to request ${id}`);
    return received.find((m) => m.id === id)!;
  };
  const initialize = async () => {
    send({
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } },
    });
    await answer(1);
    send({ method: "notifications/initialized" });
  };
  return { input, served, send, answer, initialize };
}

Deno.test("serveMcpStdio() ends when the client closes stdin, once the turn still running is aborted and taken back", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  const stdio = servedOverStreams(h);
  await stdio.initialize();
  stdio.send({
    id: 2,
    method: "tools/call",
    params: { name: "ask", arguments: { message: "hi", session_id: "left" } },
  });
  await until(() => h.llm.calls === 1, "the model call");
  stdio.input.end();
  await stdio.served;
  assert.equal(h.llm.aborted, 1);
  assert.equal(h.deps.sessions.active, 0);
  assert.deepEqual(await h.store.messages({ userId: "local", sessionId: "left" }), []);
});

Deno.test("serveMcpStdio(): a turn that waits for approval, for a client without elicitation, says to decide in chat", async () => {
  using h = httpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  const stdio = servedOverStreams(h, "alice");
  await stdio.initialize();
  stdio.send({
    id: 2,
    method: "tools/call",
    params: { name: "ask", arguments: { message: "what is 2+3?", session_id: "w" } },
  });
  const { result } = await stdio.answer(2) as { result: ToolResult };
  assert.equal(result.structuredContent?.outcome, "awaiting_approval");
  assert.match(result.content[0].text, /Decide in chat: deno task chat --session w --user alice/);
  stdio.input.end();
  await stdio.served;
});
