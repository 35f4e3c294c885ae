/** MCP servers that misbehave: never answering, printing garbage, returning 1 MB. Never a crash. */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runTurn } from "../src/agent/loop.ts";
import { MAX_TOOL_RESULT_CHARS } from "../src/config.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { serializeToolResult } from "../src/tools/registry.ts";
import { harness, lastToolResult } from "./_harness.ts";
import { scriptServer } from "./_mcp_servers.ts";

const FAULT = fileURLToPath(new URL("./fixtures/mcp_fault_server.ts", import.meta.url));
const sdk = await loadMcpSdk();

function fault(name: string, mode: string) {
  return scriptServer(name, FAULT, [mode]);
}

Deno.test("an MCP server that never answers is one warning after the timeout and its tools are absent; the others work", async () => {
  const warnings: string[] = [];
  const mcp = await startMcpTools(
    { path: "mcp.json", servers: [fault("mute", "silent"), fault("ok", "huge")], approval: undefined },
    { sdk, timeoutMs: 1500, startTimeoutMs: 1500, warn: (line) => warnings.push(line) },
  );
  try {
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(
      warnings[0],
      /^MCP server "mute" is not available: cannot start or list its tools: .*timed out/i,
    );
    assert.deepEqual(mcp.tools().map((tool) => tool.name), ["ok__big"]);
    assert.equal(mcp.health().mute.state, "failed");
  } finally {
    await mcp.close();
  }
});

Deno.test("an MCP server printing garbage on stdout still serves its tools; a 1 MB result is cut to the result limit", async () => {
  const warnings: string[] = [];
  const mcp = await startMcpTools(
    { path: "mcp.json", servers: [fault("noisy", "garbage")], approval: undefined },
    { sdk, timeoutMs: 5000, warn: (line) => warnings.push(line) },
  );
  try {
    assert.deepEqual(warnings, []);
    using h = harness([{ toolCalls: [{ name: "noisy__big" }] }, { content: "done" }], { toolSources: [mcp] });
    const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
    assert.equal(result.outcome, "answered");
    const tool = lastToolResult(h.llm.requests[1].messages);
    assert.equal(tool.ok, true);
    assert.equal(tool.truncated, true);
    const content = h.llm.requests[1].messages.findLast((m) => m.role === "tool")!.content!;
    assert.ok(content.length <= MAX_TOOL_RESULT_CHARS, `${content.length}`);
    assert.equal(content, serializeToolResult(tool as never));
  } finally {
    await mcp.close();
  }
});

Deno.test("an MCP server slow to start (a cold npx fetch) starts within the start deadline, longer than a call's", async () => {
  const warnings: string[] = [];
  const mcp = await startMcpTools(
    { path: "mcp.json", servers: [fault("cold", "cold")], approval: undefined },
    { sdk, timeoutMs: 1000, startTimeoutMs: 30_000, warn: (line) => warnings.push(line) },
  );
  try {
    assert.deepEqual(warnings, []);
    assert.equal(mcp.health().cold.state, "ready");
    assert.deepEqual(mcp.tools().map((tool) => tool.name), ["cold__big"]);
  } finally {
    await mcp.close();
  }
});
