/**
 * Which MCP calls a stopped process left running are run again: the real filesystem server's annotations
 * (`readOnlyHint`, `idempotentHint`) and the server entry's `"safeToRepeat"` over them; and a call of its
 * non-idempotent `edit_file` stopped after its effect is answered interrupted, the file edited once.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { INTERRUPTED_ERROR, runTurn } from "../src/agent/loop.ts";
import { parseMcpConfig } from "../src/mcp/config.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { harness, keyOf, lastToolResult, stopAfterEffects, tempDir } from "./_harness.ts";
import { denoEnvironment, denoServerArgs, FILESYSTEM, mcpTest } from "./_mcp_servers.ts";

const sdk = await loadMcpSdk();

async function filesystem(dir: string, safeToRepeat?: Record<string, boolean>) {
  const entry = {
    command: "deno",
    args: denoServerArgs(FILESYSTEM, [dir]),
    env: denoEnvironment(),
    safeToRepeat,
  };
  const file = parseMcpConfig({ mcpServers: { fs: entry } }, "mcp.json");
  return await startMcpTools(file, { sdk, timeoutMs: 20_000 });
}

mcpTest(
  "MCP tools are safe to repeat by their annotations, unless the server entry says otherwise",
  async () => {
    using dir = tempDir();
    for (
      const [overrides, expected] of [
        [undefined, { read_text_file: true, write_file: true, create_directory: true, edit_file: false }],
        [{ write_file: false, edit_file: true }, {
          read_text_file: true,
          write_file: false,
          create_directory: true,
          edit_file: true,
        }],
      ] as const
    ) {
      const mcp = await filesystem(dir.path, overrides);
      try {
        using h = harness([], { toolSources: [mcp] });
        const seen = Object.fromEntries(
          Object.keys(expected).map((tool) => [tool, h.agent.tools.safeToRepeat(`fs__${tool}`)]),
        );
        assert.deepEqual(seen, expected, JSON.stringify(overrides));
      } finally {
        await mcp.close();
      }
    }
  },
);

mcpTest(
  "edit_file stopped after its effect: the retry answers it interrupted and the file is edited once",
  async () => {
    using dir = tempDir();
    const path = join(dir.path, "notes.txt");
    Deno.writeTextFileSync(path, "count: 1\n");
    const mcp = await filesystem(dir.path);
    try {
      const edit = { path, edits: [{ oldText: "count: 1", newText: "count: 2" }] };
      using h = harness([
        { toolCalls: [{ name: "fs__edit_file", arguments: edit, id: "e1" }] },
        { content: "It may have been edited; I did not edit it again." },
      ], { toolSources: [mcp] });
      const failing = stopAfterEffects(h);
      const stopped = await runTurn({ ...keyOf("s"), message: "bump the count" }, h.agent, h.run);
      assert.equal(stopped.outcome, "error");
      assert.equal(Deno.readTextFileSync(path), "count: 2\n", "the effect happened");
      failing.on = false;
      const retried = await runTurn({ ...keyOf("s"), retry: true }, h.agent, h.run);
      assert.equal(retried.outcome, "answered");
      assert.equal(Deno.readTextFileSync(path), "count: 2\n", "edited once");
      assert.deepEqual(lastToolResult(h.llm.requests[1].messages), {
        ok: false,
        data: null,
        error: INTERRUPTED_ERROR,
        truncated: false,
      });
    } finally {
      await mcp.close();
    }
  },
);
