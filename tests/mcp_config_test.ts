/** The MCP config file: validated whole, one line per problem, secrets never echoed. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../src/errors.ts";
import { parseMcpConfig, readMcpConfig } from "../src/mcp/config.ts";
import { exposedToolName, ToolNames } from "../src/mcp/tool_names.ts";
import { autoApproving, decide, parseApprovalPolicy } from "../src/approval/policy.ts";
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
  assert.match(problem({ mcpServers: { a: { command: "x", url: "http://h" } } }), /server "a": give either/);
  assert.match(problem({ mcpServers: { a: {} } }), /server "a": give either "command"/);
  assert.match(
    problem({ mcpServers: { b: { command: "x", args: "y" } } }),
    /server "b": "args" must be an array/,
  );
  assert.match(problem({ mcpServers: { c: { url: "ftp://h" } } }), /server "c": "url" must be an http/);
  assert.match(
    problem({ mcpServers: { d: { command: "x", disabled: "yes" } } }),
    /server "d": "disabled" must be/,
  );
  assert.match(
    problem({ servers: { f: { url: "http://h", type: "stdio" } } }),
    /server "f": "type" must be "http"/,
  );
  assert.match(
    problem({ mcpServers: { g: { command: "x", autoApprove: "all" } } }),
    /server "g": "autoApprove" must/,
  );
  assert.match(problem({ mcpServers: { h: { command: "x" } }, servers: { h: { command: "y" } } }), /both/);
  assert.match(
    problem({ mcpServers: { i: { command: "x", scope: "everyone" } } }),
    /server "i": "scope" must be "user"/,
  );
  for (const safeToRepeat of [["read_file"], { read_file: "yes" }, "all"]) {
    assert.match(
      problem({ mcpServers: { j: { command: "x", safeToRepeat } } }),
      /server "j": "safeToRepeat" must be an object of tool names to true or false/,
    );
  }
  const secret = problem({
    mcpServers: { e: { url: "http://h", headers: { Authorization: 7, X: "s3cret" } } },
  });
  assert.match(secret, /server "e": "headers.Authorization" must be a string, got number/);
  assert.doesNotMatch(secret, /s3cret/);
});

/** An environment of `vars` alone; a name in `denied` is one this process may not read. */
function environment(vars: Record<string, string>, denied: string[] = []): Pick<Deno.Env, "get"> {
  return {
    get(name) {
      if (denied.includes(name)) throw new Deno.errors.NotCapable(`Requires env access to "${name}"`);
      return vars[name];
    },
  };
}

/** The one line parseMcpConfig() gives for `entry` as server "gh" under `vars`. */
function expansionProblem(entry: unknown, vars: Record<string, string> = {}, denied: string[] = []): string {
  try {
    parseMcpConfig({ mcpServers: { gh: entry } }, "/x/mcp.json", { env: environment(vars, denied) });
  } catch (error) {
    assert.ok(error instanceof ConfigError);
    assert.equal(error.variable, "AGENT_MCP_CONFIG");
    return error.message;
  }
  throw new Error("no problem reported");
}

Deno.test("parseMcpConfig() fills ${VAR}, ${env:VAR}, ${VAR:-default} and ${workspaceFolder} in command, args, env, url and headers, and leaves ${user}", () => {
  const env = environment({ TOKEN: "tok-123456", BIN: "/opt/bin", HOST: "127.0.0.1", EMPTY: "" });
  const file = parseMcpConfig(
    {
      mcpServers: {
        local: {
          command: "${BIN}/server",
          args: ["--root", "${workspaceFolder}/notes", "--log=${LOG_LEVEL:-info}", "--empty=${EMPTY:-none}"],
          env: { API_TOKEN: "${env:TOKEN}", DATA: "${workspaceFolder}/data/${user}" },
        },
      },
      servers: {
        remote: {
          type: "http",
          url: "http://${HOST}:${PORT:-3001}/mcp",
          headers: { Authorization: "Bearer ${TOKEN}" },
        },
      },
    },
    "/x/mcp.json",
    { env, workspaceFolder: "/work/project" },
  );
  const [local, remote] = file.servers;
  assert.ok(local.transport === "stdio" && remote.transport === "http");
  assert.equal(local.command, "/opt/bin/server");
  assert.deepEqual(local.args, ["--root", "/work/project/notes", "--log=info", "--empty=none"]);
  assert.deepEqual(local.env, { API_TOKEN: "tok-123456", DATA: "/work/project/data/${user}" });
  assert.deepEqual(local.secrets, ["/opt/bin", "tok-123456"]);
  assert.equal(remote.url, "http://127.0.0.1:3001/mcp");
  assert.deepEqual(remote.headers, { Authorization: "Bearer tok-123456" });
  assert.deepEqual(file.variables, ["BIN", "LOG_LEVEL", "EMPTY", "TOKEN", "HOST", "PORT"]);
});

Deno.test("parseMcpConfig() with no placeholders keeps every string as written and reads no variable", () => {
  const file = parseMcpConfig(
    {
      mcpServers: { fs: { command: "npx", args: ["-y", "$HOME", "{x}", "$"], env: { A: "${user}" } } },
    },
    "/x/mcp.json",
    { env: environment({}) },
  );
  const [fs] = file.servers;
  assert.ok(fs.transport === "stdio");
  assert.deepEqual(fs.args, ["-y", "$HOME", "{x}", "$"]);
  assert.deepEqual(fs.env, { A: "${user}" });
  assert.equal(fs.secrets, undefined);
  assert.deepEqual(file.variables, []);
});

Deno.test("parseMcpConfig() names the entry and the variable, never a value, for an unset or unreadable variable, an ${input:…} and an unknown placeholder", () => {
  assert.equal(
    expansionProblem({ command: "srv", env: { TOKEN: "${GITHUB_TOKEN}" } }),
    'Invalid MCP config /x/mcp.json (AGENT_MCP_CONFIG): server "gh": "env.TOKEN" needs the variable ' +
      "GITHUB_TOKEN, which is not set (set it, or give a default: ${GITHUB_TOKEN:-default})",
  );
  const denied = expansionProblem(
    { url: "https://h/mcp", headers: { Authorization: "Bearer ${env:GITHUB_TOKEN}" } },
    { GITHUB_TOKEN: "ghp_s3cret" },
    ["GITHUB_TOKEN"],
  );
  assert.equal(
    denied,
    'Invalid MCP config /x/mcp.json (AGENT_MCP_CONFIG): server "gh": "headers.Authorization" needs the ' +
      "variable GITHUB_TOKEN, which this process may not read (grant it with --allow-env=GITHUB_TOKEN)",
  );
  assert.equal(
    expansionProblem({ command: "srv", args: ["--key", "${input:github_token}"] }),
    'Invalid MCP config /x/mcp.json (AGENT_MCP_CONFIG): server "gh": "args[1]" asks for the input ' +
      '"github_token", which only VS Code prompts for: put the value in a variable and write ${env:NAME} instead',
  );
  assert.match(
    expansionProblem({ command: "${command:pickServer}" }),
    /server "gh": "command" holds \$\{command:pickServer\}, which is not expanded here \(known: /,
  );
  assert.match(
    expansionProblem({ url: "${BASE}/mcp" }),
    /server "gh": "url" needs the variable BASE, which is not set/,
  );
  // A value read before the problem is not shown either.
  const after = expansionProblem({ command: "srv", args: ["${SET}", "${UNSET}"] }, { SET: "s3cret-value" });
  assert.match(after, /"args\[1\]" needs the variable UNSET/);
  assert.doesNotMatch(after + denied, /s3cret/);
});

Deno.test("parseMcpConfig() reads no variable for a disabled entry", () => {
  const file = parseMcpConfig(
    { mcpServers: { off: { command: "${UNSET}", disabled: true } } },
    "/x/mcp.json",
    { env: environment({}) },
  );
  assert.deepEqual(file.servers, []);
  assert.deepEqual(file.variables, []);
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
});

/** `deno task chat hello` with the MCP file at `path`, its files in `dir`, and a model nobody answers at. */
function chatWith(path: string, dir: string) {
  return runProcess("deno", ["task", "--quiet", "chat", "hello"], {
    env: {
      OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
      AGENT_MCP_CONFIG: path,
      AGENT_DB_PATH: join(dir, "s.db"),
      AGENT_TRACE_PATH: join(dir, "t.jsonl"),
      AGENT_HISTORY_PATH: join(dir, "h"),
    },
  });
}

Deno.test("deno task chat exits 2 with one line naming the entry when the MCP file is malformed", async () => {
  using dir = tempDir();
  const path = join(dir.path, "mcp.json");
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: { fs: { command: "" } } }));
  const result = await chatWith(path, dir.path);
  assert.equal(result.code, 2, result.stderr);
  assert.equal(
    result.stderr.trim(),
    `Invalid MCP config ${path} (AGENT_MCP_CONFIG): server "fs": "command" must be a non-empty string`,
  );
});

Deno.test("deno task chat exits 2 naming an unset variable of the MCP file and its entry, as unset rather than unreadable", async () => {
  using dir = tempDir();
  const path = join(dir.path, "mcp.json");
  const entry = { command: "deno", env: { TOKEN: "${MCPVARS_TEST_UNSET}" } };
  Deno.writeTextFileSync(path, JSON.stringify({ mcpServers: { gh: entry } }));
  const result = await chatWith(path, dir.path);
  assert.equal(result.code, 2, result.stderr);
  assert.equal(
    result.stderr.trim(),
    `Invalid MCP config ${path} (AGENT_MCP_CONFIG): server "gh": "env.TOKEN" needs the variable ` +
      "MCPVARS_TEST_UNSET, which is not set (set it, or give a default: ${MCPVARS_TEST_UNSET:-default})",
  );
});

Deno.test("deno task chat starts with a Cline file: the disabled server is skipped and an unknown key is one warning line", async () => {
  using dir = tempDir();
  const path = join(dir.path, "mcp.json");
  const config = {
    mcpServers: { off: { command: "no-such-command", disabled: true, timeout: 60 } },
    other: 1,
  };
  Deno.writeTextFileSync(path, JSON.stringify(config));
  const result = await chatWith(path, dir.path);
  // It ran the turn (the model is unreachable: exit 1), not stopped at the file (exit 2).
  assert.equal(result.code, 1, result.stderr);
  assert.match(result.stderr, /MCP config .*mcp\.json: ignored the unknown top-level key "other"/);
  assert.doesNotMatch(result.stderr, /no-such-command|Invalid MCP config/);
});

Deno.test("parseMcpConfig() reads VS Code's \"servers\" and Cline's entries; an unknown key is a warning line, not an error", () => {
  const file = parseMcpConfig({
    inputs: [{ id: "key" }],
    servers: {
      local: { type: "stdio", command: "npx", args: ["-y", "pkg"], cwd: "/srv" },
      remote: { type: "http", url: "http://127.0.0.1:3001/mcp" },
      legacy: { type: "sse", url: "http://127.0.0.1:3002/sse" },
    },
    mcpServers: {
      cline: { command: "node", args: ["s.js"], disabled: false, autoApprove: ["read", "list"], timeout: 60 },
      roo: { url: "http://127.0.0.1:3003/sse", transportType: "sse", alwaysAllow: ["ping"] },
      off: { command: "node", disabled: true, autoApprove: ["never_started"] },
    },
  }, "/x/mcp.json");
  assert.deepEqual(file.servers.map((s) => [s.name, s.transport]), [
    ["cline", "stdio"],
    ["roo", "sse"],
    ["local", "stdio"],
    ["remote", "http"],
    ["legacy", "sse"],
  ]);
  assert.deepEqual(file.autoApproved, ["cline__read", "cline__list", "roo__ping", "off__never_started"]);
  assert.deepEqual(file.warnings, [
    'MCP config /x/mcp.json: ignored the unknown top-level key "inputs" (known: mcpServers, servers, approval)',
    'MCP config /x/mcp.json: server "cline": ignored the unknown key "timeout" (known: command, args, env, type, transportType, disabled, autoApprove, alwaysAllow, scope, safeToRepeat)',
    'MCP config /x/mcp.json: server "local": ignored the unknown key "cwd" (known: command, args, env, type, transportType, disabled, autoApprove, alwaysAllow, scope, safeToRepeat)',
  ]);
});

Deno.test("autoApproving() runs the listed tools at once unless the approval section names them itself", () => {
  const policy = parseApprovalPolicy(
    { default: "ask", tools: { "fs__*": "ask", "fs__rm": "deny" } },
    "m.json",
  );
  const merged = autoApproving(policy, ["fs__read", "fs__rm"]);
  assert.equal(decide(merged, "fs__read"), "auto");
  assert.equal(decide(merged, "fs__rm"), "deny");
  assert.equal(decide(merged, "fs__write"), "ask");
  assert.equal(decide(policy, "fs__read"), "ask");
  assert.equal(autoApproving(policy, []), policy);
});
