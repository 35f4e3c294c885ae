import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../src/config.ts";
import { missingPermissions, taskPermissionFlags } from "../src/permissions.ts";
import { DOCS_DIR } from "../src/config.ts";
import { tempDir } from "./_harness.ts";

const PROBE = fileURLToPath(new URL("./fixtures/permission_probe.ts", import.meta.url));

Deno.test("taskPermissionFlags() grants net only to the LLM's host:port and files only to the data folders", () => {
  const flags = taskPermissionFlags({
    OPENAI_BASE_URL: "https://api.deepseek.com/v1",
    AGENT_DB_PATH: "/srv/agent/db/s.db",
    AGENT_TRACE_PATH: "/var/log/agent/t.jsonl",
    AGENT_HISTORY_PATH: "/srv/agent/db/history",
  });
  assert.ok(flags.includes("--allow-net=api.deepseek.com:443"));
  assert.ok(flags.includes("--allow-write=/srv/agent/db,/var/log/agent"));
  assert.ok(flags.includes(`--allow-read=/srv/agent/db,/var/log/agent,${DOCS_DIR}`));
  assert.ok(flags[0].startsWith("--allow-env=OPENAI_API_KEY,"));
  assert.ok(
    !flags.some((f) => f === "-A" || f === "--allow-all" || f === "--allow-net" || f === "--allow-read"),
  );
});

Deno.test("taskPermissionFlags() lets chat alone read and write the input history's folder, and read NO_COLOR and TERM", () => {
  const env = {
    AGENT_DB_PATH: "/srv/agent/db/s.db",
    AGENT_TRACE_PATH: "/srv/agent/db/t.jsonl",
    AGENT_HISTORY_PATH: "/home/me/.agent/history",
  };
  const chat = taskPermissionFlags(env);
  assert.ok(chat.includes("--allow-write=/srv/agent/db,/home/me/.agent"), chat.join(" "));
  assert.ok(chat[0].endsWith(",NO_COLOR,TERM,OTEL_DENO"));
  const serve = taskPermissionFlags(env, { task: "serve" });
  assert.ok(serve.includes("--allow-write=/srv/agent/db"), serve.join(" "));
});

Deno.test("taskPermissionFlags() lets every task read OTEL_DENO and no other OTEL_ variable: Deno's exporter reads its own", () => {
  for (const task of ["chat", "serve", "demo", "compile"] as const) {
    const names = taskPermissionFlags({}, { task })[0].slice("--allow-env=".length).split(",");
    assert.deepEqual(names.filter((name) => name.startsWith("OTEL_")), ["OTEL_DENO"], task);
  }
});

Deno.test("taskPermissionFlags() with AGENT_DATABASE_URL grants net to exactly its host:port and the client's variables", () => {
  const env = {
    OPENAI_BASE_URL: "https://api.deepseek.com/v1",
    AGENT_DB_PATH: "/srv/agent/db/s.db",
    AGENT_TRACE_PATH: "/var/log/agent/t.jsonl",
    AGENT_HISTORY_PATH: "/var/log/agent/history",
    AGENT_DATABASE_URL: "postgres://agent:pw-SENTINEL@db.internal/agent",
  };
  for (const task of ["chat", "serve"] as const) {
    const flags = taskPermissionFlags(env, { task });
    const net = flags.find((f) => f.startsWith("--allow-net="))!.slice("--allow-net=".length).split(",");
    assert.deepEqual(net.filter((host) => host !== "127.0.0.1:8787"), [
      "api.deepseek.com:443",
      "db.internal:5432",
    ]);
    const names = flags[0].slice("--allow-env=".length).split(",");
    assert.deepEqual(names.filter((n) => n.startsWith("PG")), [
      "PGPASSWORD",
      "PGAPPNAME",
      "PGTARGETSESSIONATTRS",
    ]);
    // The SQLite file's folder is not needed.
    assert.ok(flags.includes("--allow-write=/var/log/agent"), flags.join(" "));
    assert.ok(!flags.join(" ").includes("SENTINEL"));
  }
  const sqlite = taskPermissionFlags({ ...env, AGENT_DATABASE_URL: "" });
  assert.ok(!sqlite.join(" ").includes("PGPASSWORD") && !sqlite.join(" ").includes("db.internal"));
});

Deno.test("missingPermissions() names the database's net flag and the client's variables when they are not granted", () => {
  const config = loadConfig({
    OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
    AGENT_DB_PATH: "/tmp/x/s.db",
    AGENT_DATABASE_URL: "postgres://agent@db.internal:6432/agent",
  });
  const missing = missingPermissions(config);
  assert.ok(missing.includes("--allow-net=db.internal:6432"), missing.join(" "));
  // Tests run with --allow-env: every variable is granted.
  assert.ok(!missing.some((flag) => flag.startsWith("--allow-env")), missing.join(" "));
});

Deno.test("taskPermissionFlags() grants only env when the configuration is invalid, so the program reports it", () => {
  assert.deepEqual(taskPermissionFlags({ OPENAI_BASE_URL: "ftp://x" }).length, 1);
});

Deno.test("missingPermissions() names the exact net flag this process lacks", () => {
  const config = loadConfig({ OPENAI_BASE_URL: "https://api.example.com/v1", AGENT_DB_PATH: "/tmp/x/s.db" });
  // Tests run with --allow-net=127.0.0.1 only.
  assert.ok(missingPermissions(config).includes("--allow-net=api.example.com:443"));
});

Deno.test("under the chat task's own flags a fetch to any other host and a read outside the data are denied", async () => {
  using dir = tempDir();
  const target = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, () => new Response("ok"));
  const port = target.addr.port;
  const flags = taskPermissionFlags({
    OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`,
    AGENT_DB_PATH: `${dir.path}/data/s.db`,
    AGENT_TRACE_PATH: `${dir.path}/data/t.jsonl`,
  });
  Deno.mkdirSync(`${dir.path}/data`);
  Deno.writeTextFileSync(`${dir.path}/data/inside.txt`, "x");
  Deno.writeTextFileSync(`${dir.path}/outside.txt`, "x");
  const { stdout, code } = await new Deno.Command("deno", {
    args: [
      "run",
      "--no-prompt",
      ...flags,
      PROBE,
      `http://127.0.0.1:${port}/`,
      `http://localhost:${port}/`,
      `http://127.0.0.2:${port}/`,
      `http://127.0.0.1:${port + 1}/`,
      "https://example.com/",
      `${dir.path}/data/inside.txt`,
      `${dir.path}/outside.txt`,
      "/etc/hostname",
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  await target.shutdown();
  assert.equal(code, 0);
  const results = new TextDecoder().decode(stdout).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(results.map((r) => r.allowed), [true, false, false, false, false, true, false, false]);
});

Deno.test("taskPermissionFlags() for serve adds only the listen address to the net grant", () => {
  const flags = taskPermissionFlags(
    { OPENAI_BASE_URL: "https://api.openai.com/v1", AGENT_HOST: "127.0.0.1", AGENT_PORT: "9000" },
    { task: "serve" },
  );
  assert.ok(flags.includes("--allow-net=api.openai.com:443,127.0.0.1:9000"));
  const demo = taskPermissionFlags({}, { task: "demo", tempDir: "/var/tmp" });
  assert.ok(demo.includes("--allow-write=/var/tmp"));
  assert.ok(demo.includes(`--allow-read=/var/tmp,${DOCS_DIR}`));
});

Deno.test("taskPermissionFlags() for compile keeps relative data folders relative and grants net to the settings' hosts", () => {
  const flags = taskPermissionFlags(
    {
      OPENAI_BASE_URL: "http://10.0.0.5:11434/v1",
      AGENT_PORT: "9000",
      AGENT_TRACE_PATH: "/var/log/agent/t.jsonl",
    },
    { task: "compile", tempDir: "/tmp" },
  );
  // data/ (sessions.db, chat_history) is resolved against the binary's working directory when it runs.
  assert.ok(flags.includes("--allow-write=data,/var/log/agent,/tmp"), flags.join(" "));
  assert.ok(flags.includes("--allow-read=data,/var/log/agent,/tmp"), flags.join(" "));
  assert.ok(flags.includes("--allow-net=10.0.0.5:11434,127.0.0.1:9000"), flags.join(" "));
  assert.ok(!flags.some((f) => f.includes(Deno.cwd())), "nothing of the build machine's folder");
});

Deno.test("taskPermissionFlags() grants the variables an MCP file's placeholders name, up to an unset one", () => {
  using dir = tempDir();
  const path = `${dir.path}/mcp.json`;
  const env = { AGENT_MCP_CONFIG: path };
  const vars: Record<string, string> = { MCP_BIN: "deno", GH_TOKEN: "t" };
  const mcpEnv = { get: (name: string) => vars[name] };
  const envNames = (flags: string[]) => flags[0].slice("--allow-env=".length).split(",");
  Deno.writeTextFileSync(
    path,
    JSON.stringify({
      mcpServers: {
        gh: { command: "${MCP_BIN}", env: { TOKEN: "${env:GH_TOKEN}" } },
        web: { url: "http://127.0.0.1:${WEB_PORT:-3001}/mcp" },
      },
    }),
  );
  const flags = taskPermissionFlags(env, { mcpEnv });
  assert.ok(flags.includes("--allow-run=deno"), flags.join(" "));
  assert.ok(flags.some((flag) => flag.startsWith("--allow-net=") && flag.endsWith(",127.0.0.1:3001")));
  for (const name of ["MCP_BIN", "GH_TOKEN", "WEB_PORT", "PATH"]) {
    assert.ok(envNames(flags).includes(name), name);
  }
  delete vars.GH_TOKEN;
  const unset = taskPermissionFlags(env, { mcpEnv });
  // The program reads GH_TOKEN itself to say it is unset; the entries' grants are not given.
  assert.ok(envNames(unset).includes("GH_TOKEN") && envNames(unset).includes("MCP_BIN"));
  assert.ok(!unset.some((flag) => flag.startsWith("--allow-run")), unset.join(" "));
});
