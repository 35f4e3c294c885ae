/** The reference server over Streamable HTTP on 127.0.0.1, and the filesystem server confined to a temp folder. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runTurn } from "../src/agent/loop.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { harness, lastToolResult, tempDir } from "./_harness.ts";
import { denoServer, EVERYTHING, FILESYSTEM } from "./_mcp_servers.ts";

const sdk = await loadMcpSdk();

/** Starts the reference server's Streamable HTTP transport on a free port; resolves once it listens. */
async function httpEverything(): Promise<{ url: string; stop(): Promise<void> }> {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close();
  const child = new Deno.Command("deno", {
    args: ["run", "-A", "--quiet", EVERYTHING, "streamableHttp"],
    env: { PORT: String(port) },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("listening on port")) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the HTTP server did not start: ${seen}`);
    seen += value;
  }
  const drained = (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })();
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    stop: async () => {
      child.kill("SIGTERM");
      await child.status;
      await drained;
    },
  };
}

Deno.test("runTurn() calls the everything server over Streamable HTTP and the filesystem server confined to a folder", async () => {
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
      { name: "web", transport: "http", url: web.url, headers: { Authorization: "Bearer test-token-1234" } },
      denoServer("fs", FILESYSTEM, [root]),
    ],
    approval: undefined,
  }, { sdk, timeoutMs: 20_000, warn: (line) => warnings.push(line) });
  try {
    assert.deepEqual(warnings, []);
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
});
