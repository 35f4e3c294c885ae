/** MCP servers that misbehave: never answering, printing garbage, returning 1 MB. Never a crash. */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runTurn } from "../src/agent/loop.ts";
import { MAX_TOOL_RESULT_CHARS } from "../src/config.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { serializeToolResult } from "../src/tools/registry.ts";
import type { StdioServerConfig } from "../src/mcp/config.ts";
import { harness, lastToolResult, tempDir } from "./_harness.ts";
import { denoEnvironment, scriptServer } from "./_mcp_servers.ts";

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

/** A stdio server entry that runs `script` with `deno eval`, `env` given to it. */
function evalServer(name: string, script: string, env: Record<string, string> = {}): StdioServerConfig {
  return {
    name,
    transport: "stdio",
    command: "deno",
    args: ["eval", script],
    env: { ...denoEnvironment(), ...env },
  };
}

/** Writes 30 numbered lines to stderr, then its token, a key-shaped string and an escape code, and exits. */
const DYING = `
  const lines = Array.from({ length: 30 }, (_, i) => "line " + (i + 1)).join("\\n");
  console.error(lines);
  console.error("using the token " + Deno.env.get("API_TOKEN") + " for " + Deno.env.get("DEBUG"));
  console.error("\\x1b[31mError:\\x1b[0m the key sk-live0123456789abcdefghij was refused");
  Deno.exit(1);
`;

Deno.test("an MCP server that exits at start is one warning with the last lines of its stderr, redacted, and health() holds them", async () => {
  const warnings: string[] = [];
  const secret = "plain-secret-value";
  const mcp = await startMcpTools(
    {
      path: "mcp.json",
      servers: [evalServer("dies", DYING, { API_TOKEN: secret, DEBUG: "1" })],
      approval: undefined,
    },
    { sdk, timeoutMs: 5000, warn: (line) => warnings.push(line) },
  );
  try {
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(
      warnings[0],
      /^MCP server "dies" is not available: cannot start or list its tools: .*Connection closed; stderr: line 13 .*line 30 \| using the token \[redacted\] for 1 \| Error: the key \[redacted\] was refused$/,
    );
    const health = mcp.health().dies;
    assert.equal(health.state, "failed");
    assert.deepEqual(health.stderr, [
      ...Array.from({ length: 18 }, (_, i) => `line ${i + 13}`),
      "using the token [redacted] for 1",
      "Error: the key [redacted] was refused",
    ]);
    assert.match(health.error!, /; trying again in \d+ s; stderr: line 13 \| /);
    assert.doesNotMatch(JSON.stringify(health) + warnings[0], /plain-secret|sk-live/);
    assert.ok(!warnings[0].includes("\x1b") && !health.stderr!.some((line) => line.includes("\x1b")));
  } finally {
    await mcp.close();
  }
});

Deno.test("a call of a server that died and cannot start again has the redacted last lines of its stderr in its tool result and the trace", async () => {
  using dir = tempDir();
  const marker = `${dir.path}/crashed`;
  const server = scriptServer("fragile", FAULT, ["fragile", marker]);
  const secret = "another-secret-value";
  const args = [
    "run",
    "--quiet",
    `--allow-read=${marker}`,
    `--allow-write=${marker}`,
    "--allow-env=API_TOKEN",
    ...server.args.slice(2),
  ];
  const mcp = await startMcpTools(
    {
      path: "mcp.json",
      servers: [{ ...server, args, env: { ...server.env, API_TOKEN: secret } }],
      approval: undefined,
    },
    { sdk, timeoutMs: 5000 },
  );
  try {
    using h = harness([
      { toolCalls: [{ name: "fragile__big" }] },
      { toolCalls: [{ name: "fragile__big" }] },
      { content: "gave up" },
    ], { toolSources: [mcp] });
    const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
    assert.equal(result.outcome, "answered");
    const errors = h.events.filter((event) => event.event === "tool_result").map((event) => event.data.error);
    assert.equal(errors.length, 2, JSON.stringify(errors));
    assert.match(
      String(errors[1]),
      /MCP server "fragile" is failed: cannot start or list its tools: .*; stderr: /,
    );
    assert.match(
      String(errors[1]),
      /stderr: fragile: starting again after a crash \| fragile: token \[redacted\] refused \| fragile: cannot open the database$/,
    );
    assert.doesNotMatch(JSON.stringify(h.events), /another-secret/);
    assert.deepEqual(mcp.health().fragile.stderr, [
      "fragile: starting again after a crash",
      "fragile: token [redacted] refused",
      "fragile: cannot open the database",
    ]);
  } finally {
    await mcp.close();
  }
});
