/**
 * What a stranger's fresh clone needs: the tests read only the project's own files, and `chat` starts with
 * nothing from a package registry (test-only packages are never installed for it).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { ROOT, runProcess, tempDir } from "./_harness.ts";

function* sourceFiles(dir: string): Generator<string> {
  for (const entry of Deno.readDirSync(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) yield* sourceFiles(path);
    else if (/\.(ts|js|json|sh)$/.test(entry.name)) yield path;
  }
}

Deno.test("nothing in src/, tests/ or scripts/ reads the shared folder beside the checkout", () => {
  const offenders: string[] = [];
  // Spelled in two pieces so this file does not name what it forbids.
  const forbidden = new RegExp(["\\.\\./", "shared"].join(""));
  for (const folder of ["src", "tests", "scripts"]) {
    for (const path of sourceFiles(join(ROOT, folder))) {
      if (forbidden.test(Deno.readTextFileSync(path))) offenders.push(path.slice(ROOT.length));
    }
  }
  assert.deepEqual(offenders, []);
});

Deno.test("deno task chat answers with an empty DENO_DIR while the npm registry is unreachable", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  // A port nothing listens on: any attempt to install a package fails at once.
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const registry = `http://127.0.0.1:${closed.addr.port}/`;
  closed.close();
  try {
    const result = await runProcess("deno", ["task", "--quiet", "chat", "--session", "offline-1"], {
      clearEnv: true,
      stdin: "what is 12*(3+4)?\n",
      env: {
        PATH: Deno.env.get("PATH") ?? "",
        HOME: dir.path,
        DENO_DIR: join(dir.path, "deno-dir"),
        NPM_CONFIG_REGISTRY: registry,
        OPENAI_BASE_URL: provider.url,
        AGENT_DB_PATH: join(dir.path, "db", "sessions.db"),
        AGENT_TRACE_PATH: join(dir.path, "trace", "traces.jsonl"),
        AGENT_HISTORY_PATH: join(dir.path, "db", "chat_history"),
      },
    });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "The answer is 84.\n");
    assert.doesNotMatch(result.stderr, /Download|npm/);
  } finally {
    await provider.close();
  }
});

Deno.test("the quick start's first command, deno task -q chat --demo, answers with no key, no model and an empty DENO_DIR", async () => {
  using dir = tempDir();
  const result = await runProcess("deno", ["task", "-q", "chat", "--demo", "what is 12*(3+4)?"], {
    clearEnv: true,
    env: {
      PATH: Deno.env.get("PATH") ?? "",
      HOME: dir.path,
      DENO_DIR: join(dir.path, "deno-dir"),
      AGENT_DB_PATH: join(dir.path, "db", "sessions.db"),
      AGENT_TRACE_PATH: join(dir.path, "trace", "traces.jsonl"),
      AGENT_HISTORY_PATH: join(dir.path, "db", "chat_history"),
    },
  });
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, "12*(3+4) = 84\n");
  assert.equal(
    result.stderr,
    'demo model (demo-rules): offline rules, not an LLM; ask it "what can you do?"\n',
    "no task echo, one line saying it is the demo model",
  );
});
