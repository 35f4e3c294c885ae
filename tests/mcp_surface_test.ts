/**
 * What users see of MCP: a server's changed tool list reaches the model from the next turn, `/tools` in chat
 * lists each tool with its server, and `/healthz` of `serve` (under the task's own permission flags) reports
 * each server's state.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runTurn } from "../src/agent/loop.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { runCommand } from "../src/cli/commands.ts";
import { childEnv, harness, lastToolResult, spawnServe, tempDir } from "./_harness.ts";
import { scriptServer } from "./_mcp_servers.ts";
import { freePort } from "../scripts/_bench_process.ts";
import { until } from "./_http_harness.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";

const FAULT = fileURLToPath(new URL("./fixtures/mcp_fault_server.ts", import.meta.url));
const sdk = await loadMcpSdk();

/** An MCP file naming the fault server in `mode` as "fault", written into `dir`; its path. */
function mcpFile(dir: string, mode: string): string {
  const path = `${dir}/mcp.json`;
  const server = { command: "deno", args: ["run", "--quiet", FAULT, mode] };
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: { fault: server } }));
  return path;
}

Deno.test("a server's tools/list_changed reaches the model from the next turn, and the new tool works", async () => {
  const mcp = await startMcpTools(
    { path: "mcp.json", servers: [scriptServer("fault", FAULT, ["grow"])], approval: undefined },
    { sdk, timeoutMs: 10_000 },
  );
  try {
    using h = harness([
      { toolCalls: [{ name: "fault__grow" }] },
      { content: "grown" },
      { toolCalls: [{ name: "fault__extra_1" }] },
      { content: "done" },
    ], { toolSources: [mcp] });
    const before = mcp.version;
    await runTurn({ sessionId: "s", userId: "u", message: "grow" }, h.agent, h.run);
    const offered = (i: number) => h.llm.requests[i].tools.map((tool) => tool.name);
    assert.ok(offered(0).includes("fault__grow") && !offered(0).includes("fault__extra_1"));
    await until(() => mcp.version > before, "the refreshed list");
    await runTurn({ sessionId: "s", userId: "u", message: "use it" }, h.agent, h.run);
    assert.ok(offered(2).includes("fault__extra_1"), "offered from the next turn on");
    assert.equal(lastToolResult(h.llm.requests[3].messages).data, "extra 1");
  } finally {
    await mcp.close();
  }
});

Deno.test("/tools in chat lists the built-in tools and each MCP tool with its server", async () => {
  const mcp = await startMcpTools(
    { path: "mcp.json", servers: [scriptServer("fault", FAULT, ["huge"])], approval: undefined },
    { sdk, timeoutMs: 10_000 },
  );
  try {
    using h = harness([], { toolSources: [mcp] });
    let said = "";
    const state = { sessionId: "main", userId: "local", lastTurn: null };
    const context = {
      state,
      store: h.store,
      tools: h.agent.tools,
      write: (text: string) => (said += `${text}\n`),
      clearScreen: () => {},
      newSessionId: () => "new",
    };
    assert.equal(await runCommand("/tools", context), "done");
    assert.match(said, /^4 tools:$/m);
    assert.match(said, /^ {2}calculator +built-in +/m);
    assert.match(said, /^ {2}fault__big +MCP fault +1 MB of text$/m);
  } finally {
    await mcp.close();
  }
});

Deno.test("/healthz of serve reports each MCP server's state; a server that cannot start is said so, serve runs on", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const port = freePort();
  const path = mcpFile(dir.path, "huge");
  const file = JSON.parse(Deno.readTextFileSync(path));
  file.mcpServers.mute = { command: "deno", args: ["run", "--quiet", FAULT, "silent"] };
  Deno.writeTextFileSync(path, JSON.stringify(file));
  const env = childEnv(dir.path, {
    AGENT_PORT: String(port),
    OPENAI_BASE_URL: provider.url,
    AGENT_MCP_CONFIG: path,
    AGENT_MCP_START_TIMEOUT_SECONDS: "2",
  });
  const serve = spawnServe(["task", "--quiet", "serve"], env);
  try {
    await serve.listening;
    const health = await (await fetch(`http://127.0.0.1:${port}/healthz`)).json();
    assert.equal(health.ok, true);
    assert.equal(health.mcp.fault.state, "ready", JSON.stringify(health.mcp) + serve.stderr());
    assert.equal(health.mcp.fault.tools, 1);
    assert.equal(health.mcp.mute.state, "failed");
    assert.match(health.mcp.mute.error, /timed out; trying again in \d+ s$/i);
    assert.match(serve.stderr(), /MCP server "mute" is not available/);
  } finally {
    assert.equal(await serve.stop(), 0, serve.stderr());
    await provider.close();
  }
});

Deno.test("/healthz of serve shows the last stderr lines of a server that exits at start, its token given as ${VAR} redacted", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  const port = freePort();
  const path = `${dir.path}/mcp.json`;
  const script =
    'console.error("starting"); console.error("token " + Deno.env.get("API_TOKEN") + " refused");' +
    " Deno.exit(3);";
  const dies = { command: "deno", args: ["eval", script], env: { API_TOKEN: "${MCP_SURFACE_TOKEN}" } };
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: { dies } }));
  const env = childEnv(dir.path, {
    AGENT_PORT: String(port),
    OPENAI_BASE_URL: provider.url,
    AGENT_MCP_CONFIG: path,
    MCP_SURFACE_TOKEN: "plain-secret-value",
  });
  const serve = spawnServe(["task", "--quiet", "serve"], env);
  try {
    await serve.listening;
    const health = await (await fetch(`http://127.0.0.1:${port}/healthz`)).json();
    assert.equal(health.mcp.dies.state, "failed", JSON.stringify(health.mcp) + serve.stderr());
    assert.deepEqual(health.mcp.dies.stderr, ["starting", "token [redacted] refused"]);
    assert.match(health.mcp.dies.error, /; stderr: starting \| token \[redacted\] refused$/);
    assert.match(
      serve.stderr(),
      /MCP server "dies" is not available: cannot start or list its tools: .*; stderr: starting \| token \[redacted\] refused\n/,
    );
    assert.doesNotMatch(JSON.stringify(health) + serve.stderr(), /plain-secret-value/);
  } finally {
    assert.equal(await serve.stop(), 0, serve.stderr());
    await provider.close();
  }
});
