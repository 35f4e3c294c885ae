/** What MCP servers add to a task's permission flags, and that nothing else widens. */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { RUNTIME_LOCK, taskPermissionFlags } from "../src/permissions.ts";
import { tempDir } from "./_harness.ts";

const PROBE = fileURLToPath(new URL("./fixtures/permission_probe.ts", import.meta.url));

function writeConfig(dir: string, servers: Record<string, unknown>): string {
  const path = join(dir, "mcp.json");
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: servers }));
  return path;
}

Deno.test("taskPermissionFlags() adds --allow-run for each stdio command, --allow-net for each URL server, and the variables a server inherits", () => {
  using dir = tempDir();
  const path = writeConfig(dir.path, {
    fs: { command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/x"] },
    local: { command: "deno", args: ["run", "server.ts"], env: { API_KEY: "secret-value" } },
    remote: { url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer secret-token" } },
    legacy: { type: "sse", url: "http://127.0.0.1:3002/sse" },
    off: { command: "never-run", disabled: true },
  });
  const env = { OPENAI_BASE_URL: "https://api.openai.com/v1", AGENT_MCP_CONFIG: path };
  const flags = taskPermissionFlags(env);
  assert.ok(flags.includes("--allow-run=npx,deno"), flags.join(" "));
  assert.ok(
    flags.includes("--allow-net=api.openai.com:443,mcp.example.com:443,127.0.0.1:3002"),
    flags.join(" "),
  );
  const variables = flags[0].slice("--allow-env=".length).split(",");
  for (const name of ["PATH", "HOME", "USER"]) assert.ok(variables.includes(name), name);
  assert.ok(!variables.includes("API_KEY"), "values given in the file need no grant");
  assert.ok(flags.some((flag) => flag.startsWith("--allow-read=") && flag.endsWith(`,${path}`)));
  assert.doesNotMatch(flags.join(" "), /secret/);
  const demo = taskPermissionFlags(env, { task: "demo" });
  assert.ok(!demo.some((flag) => flag.startsWith("--allow-run")), "the demo starts no MCP server");
  assert.ok(!demo[0].split(/[=,]/).includes("PATH"));
});

Deno.test("taskPermissionFlags() without an MCP file grants no run, no extra net and no extra variables", () => {
  using dir = tempDir();
  const flags = taskPermissionFlags({ AGENT_MCP_CONFIG: join(dir.path, "absent.json") }, { task: "serve" });
  assert.ok(!flags.some((flag) => flag.startsWith("--allow-run")));
  assert.ok(flags.includes("--allow-net=api.openai.com:443,127.0.0.1:8787"), flags.join(" "));
  assert.ok(!flags[0].split(/[=,]/).includes("PATH"));
});

Deno.test("taskPermissionFlags() for a malformed MCP file grants its read, so the program reports it, and nothing for its servers", () => {
  using dir = tempDir();
  const path = writeConfig(dir.path, { bad: { command: 42 }, ok: { command: "deno" } });
  const flags = taskPermissionFlags({ AGENT_MCP_CONFIG: path });
  assert.ok(flags.some((flag) => flag.startsWith("--allow-read=") && flag.endsWith(`,${path}`)));
  assert.ok(!flags.some((flag) => flag.startsWith("--allow-run")), flags.join(" "));
});

Deno.test("under the chat task's flags from an MCP file, only its command can be spawned and only its hosts reached", async () => {
  using dir = tempDir();
  const target = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, () => new Response("ok"));
  const other = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, () => new Response("ok"));
  const path = writeConfig(dir.path, {
    local: { command: "deno", args: ["run", "server.ts"] },
    remote: { url: `http://127.0.0.1:${target.addr.port}/mcp` },
  });
  const flags = taskPermissionFlags({
    OPENAI_BASE_URL: "https://api.openai.com/v1",
    AGENT_DB_PATH: join(dir.path, "data", "s.db"),
    AGENT_TRACE_PATH: join(dir.path, "data", "t.jsonl"),
    AGENT_MCP_CONFIG: path,
  });
  try {
    const { stdout, code } = await new Deno.Command("deno", {
      args: [
        "run",
        "--no-prompt",
        ...flags,
        PROBE,
        "run:deno",
        "run:sh",
        "run:node",
        `http://127.0.0.1:${target.addr.port}/`,
        `http://127.0.0.1:${other.addr.port}/`,
        path,
      ],
      stdout: "piped",
      stderr: "inherit",
    }).output();
    assert.equal(code, 0);
    const results = new TextDecoder().decode(stdout).trim().split("\n").map((line) => JSON.parse(line));
    assert.deepEqual(results.map((r) => r.allowed), [true, false, false, true, false, true]);
  } finally {
    await target.shutdown();
    await other.shutdown();
  }
});

Deno.test("taskPermissionFlags() runs a task with the runtime's lock, frozen, exactly when an optional package loads", () => {
  using dir = tempDir();
  const lock = [`--lock=${RUNTIME_LOCK}`, "--frozen"];
  const withLock = (flags: string[]) => lock.every((flag) => flags.includes(flag));
  const servers = writeConfig(dir.path, { local: { command: "deno", args: ["run", "server.ts"] } });
  const absent = join(dir.path, "absent.json");
  assert.ok(withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: servers }, { task: "serve" })), "MCP servers");
  assert.ok(withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: absent, OTEL_DENO: "true" })), "telemetry");
  const postgres = { AGENT_MCP_CONFIG: absent, AGENT_DATABASE_URL: "postgres://agent@127.0.0.1:5432/agent" };
  assert.ok(withLock(taskPermissionFlags(postgres)), "PostgreSQL");
  assert.ok(
    withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: absent, AGENT_TOKENIZER: "o200k_base" })),
    "tokenizer",
  );
  const mcpServer = { AGENT_MCP_CONFIG: absent, AGENT_SERVE_MCP: "1" };
  assert.ok(withLock(taskPermissionFlags(mcpServer, { task: "serve" })), "serve's /mcp");
  assert.ok(withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: absent }, { task: "mcp" })), "deno task mcp");
  assert.ok(!withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: absent }, { task: "serve" })), "serve alone");
  for (const env of [{ AGENT_MCP_CONFIG: absent }, { AGENT_MCP_CONFIG: absent, OTEL_DENO: "1" }]) {
    const flags = taskPermissionFlags(env);
    assert.ok(!flags.some((flag) => flag.startsWith("--lock") || flag === "--frozen"), flags.join(" "));
  }
  assert.ok(
    !withLock(taskPermissionFlags({ AGENT_MCP_CONFIG: servers }, { task: "demo" })),
    "the demo loads none",
  );
});

Deno.test("deno.lock locks exactly the runtime's optional packages, the ones src/ names, resolved as tests/deno.lock resolves them", () => {
  type Lock = { specifiers: Record<string, string>; npm: Record<string, unknown> };
  const lock = JSON.parse(Deno.readTextFileSync(RUNTIME_LOCK)) as Lock;
  const named = new Set<string>();
  const read = (folder: URL) => {
    for (const entry of Deno.readDirSync(folder)) {
      if (entry.isDirectory) read(new URL(`${entry.name}/`, folder));
      if (!entry.name.endsWith(".ts")) continue;
      const text = Deno.readTextFileSync(new URL(entry.name, folder));
      for (const [, name] of text.matchAll(/"npm:((?:@[\w.-]+\/)?[\w.-]+@[\d.]+)/g)) named.add(`npm:${name}`);
    }
  };
  read(new URL("../src/", import.meta.url));
  assert.deepEqual(Object.keys(lock.specifiers).sort(), [...named].sort());
  // Resolved as the tests resolve them, so the packages the tests cache are the ones a task loads.
  const tests = JSON.parse(Deno.readTextFileSync(new URL("./deno.lock", import.meta.url))) as Lock;
  for (const [name, resolved] of Object.entries(lock.specifiers)) {
    assert.equal(tests.specifiers[name], resolved);
  }
  for (const [key, entry] of Object.entries(lock.npm)) assert.deepEqual(tests.npm[key], entry, key);
});
