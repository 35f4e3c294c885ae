/** The MCP config file: validated whole, one line per problem, secrets never echoed. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../src/errors.ts";
import { parseMcpConfig, readMcpConfig } from "../src/mcp/config.ts";
import { exposedToolName, ToolNames } from "../src/mcp/tool_names.ts";
import { runProcess, tempDir } from "./_harness.ts";

function problem(raw: unknown): string {
  try {
    parseMcpConfig(raw, "/x/mcp.json");
  } catch (error) {
    assert.ok(error instanceof ConfigError);
    assert.equal(error.variable, "AGENT_MCP_CONFIG");
    assert.doesNotMatch(error.message, /\n/);
    return error.message;
  }
  throw new Error("no problem reported");
}

Deno.test("parseMcpConfig() reads stdio and URL servers in file order and passes approval through untouched", () => {
  const approval = { tools: { "fs__write_file": "ask" } };
  const file = parseMcpConfig({
    mcpServers: {
      fs: { command: "npx", args: ["-y", "pkg"], env: { A: "1" } },
      web: { type: "http", url: "http://127.0.0.1:3001/mcp", headers: { Authorization: "Bearer t" } },
    },
    approval,
  }, "/x/mcp.json");
  assert.deepEqual(file.servers.map((s) => [s.name, s.transport]), [["fs", "stdio"], ["web", "http"]]);
  assert.equal(file.approval, approval);
  assert.equal(parseMcpConfig({ mcpServers: {} }, "/x").approval, undefined);
});

Deno.test("parseMcpConfig() names the entry and the problem in one line, never a header or env value", () => {
  assert.match(problem([]), /expected an object with "mcpServers", got an array/);
  assert.match(problem({ mcpServers: {}, other: 1 }), /unknown top-level key "other"/);
  assert.match(problem({ mcpServers: { a: { command: "x", url: "http://h" } } }), /server "a": give either/);
  assert.match(problem({ mcpServers: { a: {} } }), /server "a": give either "command"/);
  assert.match(
    problem({ mcpServers: { b: { command: "x", args: "y" } } }),
    /server "b": "args" must be an array/,
  );
  assert.match(problem({ mcpServers: { c: { url: "ftp://h" } } }), /server "c": "url" must be an http/);
  assert.match(problem({ mcpServers: { d: { command: "x", cwd: "/" } } }), /server "d": unknown key "cwd"/);
  const secret = problem({
    mcpServers: { e: { url: "http://h", headers: { Authorization: 7, X: "s3cret" } } },
  });
  assert.match(secret, /server "e": "headers.Authorization" must be a string, got number/);
  assert.doesNotMatch(secret, /s3cret/);
});

Deno.test("readMcpConfig() returns null for an absent file and one line for a file that is not JSON", () => {
  using dir = tempDir();
  assert.equal(readMcpConfig(join(dir.path, "none.json")), null);
  Deno.writeTextFileSync(join(dir.path, "bad.json"), "{nope");
  assert.throws(() => readMcpConfig(join(dir.path, "bad.json")), /Invalid MCP config .*bad\.json .*not JSON/);
});

Deno.test("exposedToolName() keeps <server>__<tool> when valid and shortens others deterministically and distinctly", () => {
  assert.equal(exposedToolName("fs", "read_file"), "fs__read_file");
  const long = exposedToolName("server", "t".repeat(80));
  assert.match(long, /^[a-zA-Z0-9_-]{1,64}$/);
  assert.equal(long, exposedToolName("server", "t".repeat(80)));
  const dotted = exposedToolName("my.server", "get data");
  assert.match(dotted, /^my_server__get_data_[a-z0-9]+$/);
  assert.notEqual(dotted, exposedToolName("my_server", "get data"));
  const names = new ToolNames();
  assert.equal(names.add("a", "b"), "a__b");
  assert.deepEqual(names.resolve("a__b"), { server: "a", tool: "b" });
});

Deno.test("deno task chat exits 2 with one line naming the entry when the MCP file is malformed", async () => {
  using dir = tempDir();
  const path = join(dir.path, "mcp.json");
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: { fs: { command: "" } } }));
  const result = await runProcess("deno", ["task", "--quiet", "chat", "hello"], {
    env: {
      OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
      AGENT_MCP_CONFIG: path,
      AGENT_DB_PATH: join(dir.path, "s.db"),
      AGENT_TRACE_PATH: join(dir.path, "t.jsonl"),
      AGENT_HISTORY_PATH: join(dir.path, "h"),
    },
  });
  assert.equal(result.code, 2, result.stderr);
  assert.equal(
    result.stderr.trim(),
    `Invalid MCP config ${path} (AGENT_MCP_CONFIG): server "fs": "command" must be a non-empty string`,
  );
});
