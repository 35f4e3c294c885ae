/**
 * MCP servers of `"scope": "user"`: one instance per user, so one user never sees another's state; bounded in
 * number and stopped when idle. Against the real knowledge-graph server, whose state is a file.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runTurn } from "../src/agent/loop.ts";
import type { McpServerConfig } from "../src/mcp/config.ts";
import { startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { openToolConfig } from "../src/mcp/start.ts";
import { forUser } from "../src/mcp/user_servers.ts";
import type { ScriptStep } from "../src/llm/scripted.ts";
import { harness, lastToolResult, tempDir } from "./_harness.ts";
import { until } from "./_http_harness.ts";
import { denoServer, mcpTest, MEMORY, scriptServer } from "./_mcp_servers.ts";

const sdk = await loadMcpSdk();

/** The memory server keeping its graph in `dir`, one file per user (`${user}`), in `scope`. */
function memoryServer(dir: string, scope: "user" | "shared"): McpServerConfig {
  const server = denoServer("memory", MEMORY);
  return { ...server, env: { ...server.env, MEMORY_FILE_PATH: join(dir, "graph-${user}.jsonl") }, scope };
}

const remember = (name: string): ScriptStep => ({
  toolCalls: [{
    name: "memory__create_entities",
    arguments: { entities: [{ name, entityType: "pet", observations: ["black"] }] },
  }],
});
const recall: ScriptStep = { toolCalls: [{ name: "memory__read_graph", arguments: {} }] };

/** The entity names `userId` reads back after the steps before it. */
async function entitiesSeen(
  mcp: Awaited<ReturnType<typeof startMcpTools>>,
  userId: string,
  before: ScriptStep[],
) {
  using h = harness([...before, recall, { content: "done" }], { toolSources: [mcp] });
  const result = await runTurn({ sessionId: "s", userId, message: "go" }, h.agent, h.run);
  assert.equal(result.outcome, "answered");
  const graph = lastToolResult(h.llm.requests[before.length + 1].messages);
  assert.equal(graph.ok, true, JSON.stringify(graph));
  const { structured } = graph.data as { structured: { entities: { name: string }[] } };
  return structured.entities.map((entity) => entity.name);
}

for (const scope of ["user", "shared"] as const) {
  mcpTest(
    `two users of a ${scope}-scoped memory server: ${
      scope === "user" ? "each sees only their own" : "bob sees alice's"
    } state`,
    async () => {
      using dir = tempDir();
      const mcp = await startMcpTools(
        { path: "mcp.json", servers: [memoryServer(dir.path, scope)], approval: undefined },
        { sdk, timeoutMs: 20_000 },
      );
      try {
        assert.deepEqual(await entitiesSeen(mcp, "alice", [remember("alice-cat")]), ["alice-cat"]);
        assert.deepEqual(await entitiesSeen(mcp, "bob", []), scope === "user" ? [] : ["alice-cat"]);
        assert.deepEqual(await entitiesSeen(mcp, "alice", []), ["alice-cat"]);
        assert.equal(mcp.health().memory.users, scope === "user" ? 2 : undefined);
      } finally {
        await mcp.close();
      }
    },
  );
}

mcpTest(
  "a user-scoped server runs at most maxUsers instances, the least recently used idle one stopped first, and stops idle ones",
  async () => {
    using dir = tempDir();
    const mcp = await startMcpTools(
      { path: "mcp.json", servers: [memoryServer(dir.path, "user")], approval: undefined },
      { sdk, timeoutMs: 20_000, maxUsers: 1, idleMs: 300 },
    );
    try {
      assert.deepEqual(await entitiesSeen(mcp, "alice", [remember("alice-cat")]), ["alice-cat"]);
      assert.equal(mcp.health().memory.users, 1);
      assert.deepEqual(await entitiesSeen(mcp, "bob", [remember("bob-dog")]), ["bob-dog"]);
      assert.equal(mcp.health().memory.users, 1, "alice's instance made room for bob's");
      // Alice's state is in her file: a new instance of hers reads it again.
      assert.deepEqual(await entitiesSeen(mcp, "alice", []), ["alice-cat"]);
      await until(() => mcp.health().memory.users === 0, "the idle instance stopped", 30_000);
    } finally {
      await mcp.close();
    }
  },
);

Deno.test("forUser() puts the user's id for ${user} in a stdio entry's args and env values only", () => {
  const config: McpServerConfig = {
    name: "m",
    transport: "stdio",
    command: "srv-${user}",
    args: ["--data", "/d/${user}/${user}.db"],
    env: { DATA: "/d/${user}", KEEP: "x" },
  };
  assert.deepEqual(forUser(config, "alice"), {
    ...config,
    args: ["--data", "/d/alice/alice.db"],
    env: { DATA: "/d/alice", KEEP: "x" },
  });
  const http: McpServerConfig = {
    name: "h",
    transport: "http",
    url: "http://127.0.0.1:1/mcp?u=${user}",
    headers: {},
  };
  assert.equal(forUser(http, "alice"), http);
});

Deno.test('openToolConfig(): with more than one configured user a server without "scope" is user-scoped; with one, shared', async () => {
  using dir = tempDir();
  const path = join(dir.path, "mcp.json");
  const fault = scriptServer("fault", new URL("./fixtures/mcp_fault_server.ts", import.meta.url).pathname);
  const entry = { command: fault.command, args: fault.args, env: fault.env };
  Deno.writeTextFileSync(
    path,
    JSON.stringify({ mcpServers: { fault: entry, own: { ...entry, scope: "shared" } } }),
  );
  const settings = { mcpConfig: path, mcpTimeoutSeconds: 10, mcpStartTimeoutSeconds: 60 };
  const tokens = (...users: string[]) =>
    users.map((userId, i) => ({ token: `token-${i}-0123456789abcdef`, userId }));
  for (const [users, scope] of [[["alice", "bob"], "user"], [["alice", "alice"], undefined]] as const) {
    const { mcp } = await openToolConfig({ ...settings, apiTokens: tokens(...users) }, () => {});
    try {
      assert.equal(mcp!.health().fault.scope, scope, users.join(","));
      assert.equal(mcp!.health().own.scope, undefined);
    } finally {
      await mcp!.close();
    }
  }
});
