/** The reference server over Streamable HTTP on 127.0.0.1, and the filesystem server confined to a temp folder. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runTurn } from "../src/agent/loop.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { openToolConfig } from "../src/mcp/start.ts";
import { decide } from "../src/approval/policy.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { harness, lastToolResult, tempDir } from "./_harness.ts";
import { until } from "./_http_harness.ts";
import { denoServer, denoServerArgs, EVERYTHING, FILESYSTEM, mcpTest } from "./_mcp_servers.ts";

const sdk = await loadMcpSdk();

/** The line saying the reference server's one tool that must run as an MCP task is not offered. */
function taskToolLeftOut(server: string): string {
  return `MCP tool "simulate-research-query" of server "${server}" is left out: it requires task-based ` +
    "execution, which this client does not run";
}

function freePort(): number {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  return port;
}

/**
 * Starts the reference server over HTTP on `port`, or a free port, Streamable HTTP (`/mcp`) or the older
 * HTTP+SSE transport (`/sse`); resolves once it listens. A free port another process took before the server
 * bound it is replaced by another.
 */
async function httpEverything(
  transport: "streamableHttp" | "sse" = "streamableHttp",
  port?: number,
): Promise<{ url: string; port: number; stop(): Promise<void> }> {
  for (let attempt = 1;; attempt++) {
    try {
      return await startEverything(transport, port ?? freePort());
    } catch (error) {
      if (
        port !== undefined || attempt >= 5 ||
        !/EADDRINUSE|AddrInUse|address already in use/i.test(String(error))
      ) throw error;
    }
  }
}

async function startEverything(
  transport: "streamableHttp" | "sse",
  port: number,
): Promise<{ url: string; port: number; stop(): Promise<void> }> {
  const child = new Deno.Command("deno", {
    args: denoServerArgs(EVERYTHING, [transport]),
    env: { PORT: String(port) },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!/(listening|running) on port/.test(seen)) {
    const { done, value } = await reader.read();
    if (done) {
      await child.status;
      throw new Error(`the HTTP server did not start: ${seen}`);
    }
    seen += value;
  }
  const drained = (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })();
  return {
    port,
    url: `http://127.0.0.1:${port}/${transport === "sse" ? "sse" : "mcp"}`,
    stop: async () => {
      child.kill("SIGTERM");
      await child.status;
      await drained;
    },
  };
}

mcpTest(
  "runTurn() calls the everything server over Streamable HTTP and the filesystem server confined to a folder",
  async () => {
    using dir = tempDir();
    const root = join(dir.path, "root");
    Deno.mkdirSync(root);
    Deno.writeTextFileSync(join(root, "note.txt"), "hello from the folder");
    Deno.writeTextFileSync(join(dir.path, "outside.txt"), "secret");
    const web = await httpEverything();
    const warnings: string[] = [];
    const mcp = await startMcpTools({
      path: "mcp.json",
      servers: [
        {
          name: "web",
          transport: "http",
          url: web.url,
          headers: { Authorization: "Bearer test-token-1234" },
        },
        denoServer("fs", FILESYSTEM, [root]),
      ],
      approval: undefined,
    }, { sdk, timeoutMs: 20_000, warn: (line) => warnings.push(line) });
    try {
      assert.deepEqual(warnings, [taskToolLeftOut("web")]);
      using h = harness([
        { toolCalls: [{ name: "web__echo", arguments: { message: "over http" } }] },
        { toolCalls: [{ name: "fs__read_text_file", arguments: { path: join(root, "note.txt") } }] },
        { toolCalls: [{ name: "fs__read_text_file", arguments: { path: join(dir.path, "outside.txt") } }] },
        { content: "done" },
      ], { toolSources: [mcp] });
      const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      assert.equal(lastToolResult(h.llm.requests[1].messages).data, "Echo: over http");
      const inside = lastToolResult(h.llm.requests[2].messages).data as { text: string };
      assert.equal(inside.text, "hello from the folder");
      const outside = lastToolResult(h.llm.requests[3].messages);
      assert.equal(outside.ok, false);
      assert.doesNotMatch(JSON.stringify(outside), /secret/);
      assert.deepEqual(Object.fromEntries(Object.entries(mcp.health()).map(([k, v]) => [k, v.state])), {
        web: "ready",
        fs: "ready",
      });
      assert.doesNotMatch(JSON.stringify(h.events), /test-token-1234/);
    } finally {
      await mcp.close();
      await web.stop();
    }
  },
);

mcpTest(
  "openToolConfig() takes VS Code's \"servers\" and Cline's entries: an SSE server is used, a disabled one is not started, autoApprove runs without asking, unknown keys are warnings",
  async () => {
    using dir = tempDir();
    const sse = await httpEverything("sse");
    const path = join(dir.path, "mcp.json");
    Deno.writeTextFileSync(
      path,
      JSON.stringify({
        inputs: [],
        servers: {
          old: {
            type: "sse",
            url: sse.url,
            headers: { Authorization: "Bearer sse-token-5678" },
            autoApprove: ["echo"],
          },
        },
        mcpServers: {
          off: { command: "no-such-command-anywhere", disabled: true },
        },
        approval: { default: "ask" },
      }),
    );
    const warnings: string[] = [];
    const { mcp, approval } = await openToolConfig(
      { mcpConfig: path, mcpTimeoutSeconds: 20, mcpStartTimeoutSeconds: 60, apiTokens: [] },
      (line) => warnings.push(line),
    );
    try {
      assert.deepEqual(warnings, [
        `MCP config ${path}: ignored the unknown top-level key "inputs" (known: mcpServers, servers, approval)`,
        taskToolLeftOut("old"),
      ]);
      assert.deepEqual(Object.keys(mcp!.health()), ["old"]);
      assert.equal(mcp!.health().old.state, "ready");
      assert.equal(mcp!.health().old.transport, "sse");
      assert.equal(decide(approval, "old__echo"), "auto");
      assert.equal(decide(approval, "old__get-sum"), "ask");
      using h = harness([
        { toolCalls: [{ name: "old__echo", arguments: { message: "over sse" } }] },
        { content: "done" },
      ], { toolSources: [mcp!] });
      h.agent.approval = approval;
      const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      assert.equal(lastToolResult(h.llm.requests[1].messages).data, "Echo: over sse");
      assert.doesNotMatch(JSON.stringify(h.events), /sse-token-5678/);
    } finally {
      await mcp?.close();
      await sse.stop();
    }
  },
);

mcpTest(
  "an HTTP MCP server restarted under a running client is used again on the next call: a lost session is started anew",
  async () => {
    let web = await httpEverything();
    const warnings: string[] = [];
    const mcp = await startMcpTools({
      path: "mcp.json",
      servers: [{ name: "web", transport: "http", url: web.url, headers: {} }],
      approval: undefined,
    }, { sdk, timeoutMs: 20_000, warn: (line) => warnings.push(line) });
    try {
      const echo = (message: string) => ({ toolCalls: [{ name: "web__echo", arguments: { message } }] });
      using h = harness([echo("before"), echo("after"), { content: "done" }], { toolSources: [mcp] });
      const execute = h.agent.tools.execute.bind(h.agent.tools);
      let calls = 0;
      h.agent.tools.execute = async (call, context) => {
        // Between the two calls the server restarts on the same port, forgetting every session.
        if (calls++ === 1) {
          await web.stop();
          web = await httpEverything("streamableHttp", web.port);
        }
        return await execute(call, context);
      };
      const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      assert.equal(lastToolResult(h.llm.requests[1].messages).data, "Echo: before");
      const after = lastToolResult(h.llm.requests[2].messages);
      assert.equal(after.data, "Echo: after", JSON.stringify(after));
      assert.equal(mcp.health().web.state, "ready");
      assert.deepEqual(warnings, [
        taskToolLeftOut("web"),
        'MCP server "web" lost its session; starting a new one',
      ]);
    } finally {
      await mcp.close();
      await web.stop();
    }
  },
);

mcpTest(
  "an MCP server that failed at start is tried again in the background and its tools come back without a restart",
  async () => {
    const port = freePort();
    const url = `http://127.0.0.1:${port}/mcp`;
    const warnings: string[] = [];
    const mcp = await startMcpTools({
      path: "mcp.json",
      servers: [{ name: "late", transport: "http", url, headers: {} }],
      approval: undefined,
    }, {
      sdk,
      timeoutMs: 20_000,
      retry: { minTimeout: 100, multiplier: 2, maxTimeout: 400 },
      warn: (line) => warnings.push(line),
    });
    let web: Awaited<ReturnType<typeof httpEverything>> | null = null;
    try {
      // Nothing listens yet: it failed, says it will try again, and offers no tool.
      assert.equal(mcp.health().late.state, "failed");
      assert.match(mcp.health().late.error!, /cannot start or list its tools: .*; trying again in 1 s$/);
      assert.deepEqual(mcp.tools(), []);
      assert.equal(warnings.length, 1);
      web = await httpEverything("streamableHttp", port);
      await until(
        () => mcp.health().late.state === "ready",
        "the server started by a background try",
        30_000,
      );
      assert.ok(mcp.tools().some((tool) => tool.name === "late__echo"));
      assert.deepEqual(warnings.slice(1), ['MCP server "late" is available again', taskToolLeftOut("late")]);
      using h = harness([{ toolCalls: [{ name: "late__echo", arguments: { message: "back" } }] }, {
        content: "ok",
      }], {
        toolSources: [mcp],
      });
      const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      assert.equal(lastToolResult(h.llm.requests[1].messages).data, "Echo: back");
    } finally {
      await mcp.close();
      await web?.stop();
    }
  },
);
