/**
 * Start-up of `chat` and `serve`: settings reach the runtime, and each failure is one line on stderr naming
 * what failed, the path or port, and what to do, with exit code 2, before any input is read.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { completion, json, startFaultProvider } from "./fixtures/fault_provider.ts";
import { childEnv, runProcess, tempDir } from "./_harness.ts";
import { probeProvider } from "../src/llm/probe.ts";
import { freePort } from "../scripts/_bench_process.ts";

/**
 * Makes a file or folder unwritable: by its permission bits, and where those do not bind (root ignores them)
 * by the immutable attribute. Returns the undo.
 */
function makeUnwritable(path: string): () => void {
  const mode = Deno.statSync(path).mode! & 0o777;
  Deno.chmodSync(path, Deno.statSync(path).isDirectory ? 0o555 : 0o444);
  const chattr = (flag: string) => new Deno.Command("chattr", { args: [flag, path] }).outputSync().success;
  const immutable = !writable(path) ? false : chattr("+i");
  return () => {
    if (immutable) chattr("-i");
    Deno.chmodSync(path, mode);
  };
}

/** Whether a write into `path` (a folder: a new file in it; a file: an append) goes through. */
function writable(path: string): boolean {
  try {
    if (Deno.statSync(path).isDirectory) {
      Deno.writeTextFileSync(`${path}/.probe`, "x");
      Deno.removeSync(`${path}/.probe`);
    } else {
      Deno.openSync(path, { append: true }).close();
    }
    return true;
  } catch {
    return false;
  }
}

/** Whether this machine can make a path unwritable for this process (root needs `chattr +i` to work). */
function canMakeUnwritable(): boolean {
  const dir = Deno.makeTempDirSync({ prefix: "mra-probe-" });
  const undo = makeUnwritable(dir);
  const works = !writable(dir);
  undo();
  Deno.removeSync(dir, { recursive: true });
  return works;
}

const unwritable = canMakeUnwritable();
const IGNORE_REASON = "cannot make a path unwritable here (root, and chattr +i does not work)";
if (!unwritable) console.log(`ignored: ${IGNORE_REASON}`);

function env(dir: string, extra: Record<string, string>): Record<string, string> {
  return childEnv(dir, extra);
}

function task(name: "chat" | "serve", vars: Record<string, string>, stdin = "") {
  return runProcess("deno", ["task", "--quiet", name], { env: vars, stdin, clearEnv: true });
}

/** The one line a start-up failure prints, checked for its shape. */
function assertOneLine(result: { code: number; stdout: string; stderr: string }, pattern: RegExp): void {
  assert.equal(result.code, 2, result.stderr);
  assert.equal(result.stdout, "");
  const lines = result.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `one line, got:\n${result.stderr}`);
  assert.match(lines[0], pattern);
  assert.doesNotMatch(lines[0], /^\s+at |error: Uncaught/);
}

Deno.test({
  name: "chat with an unwritable database folder exits 2 with one line naming the folder, reading no input",
  ignore: !unwritable,
  fn: async () => {
    using dir = tempDir();
    const provider = startFakeProvider();
    const locked = join(dir.path, "locked");
    Deno.mkdirSync(locked);
    const undo = makeUnwritable(locked);
    try {
      const vars = env(dir.path, {
        OPENAI_BASE_URL: provider.url,
        AGENT_DB_PATH: join(locked, "db", "sessions.db"),
      });
      const result = await task("chat", vars, "what is 12*(3+4)?\n");
      assertOneLine(
        result,
        new RegExp(`^Cannot create the database folder ${locked}/db: .*; .*set AGENT_DB_PATH`),
      );
      assert.equal(provider.requests.length, 0, "no turn ran");

      // The folder exists but takes no new file: SQLite cannot create the database in it.
      const inside = env(dir.path, { OPENAI_BASE_URL: provider.url, AGENT_DB_PATH: join(locked, "s.db") });
      assertOneLine(
        await task("chat", inside, "hi\n"),
        new RegExp(`^Cannot open the session database ${locked}/s\\.db: .*; .*AGENT_DB_PATH`),
      );
      assert.equal(provider.requests.length, 0, "no turn ran");
    } finally {
      undo();
      await provider.close();
    }
  },
});

Deno.test({
  name: "chat with a read-only database file exits 2 before reading input, and the file is unchanged",
  ignore: !unwritable,
  fn: async () => {
    using dir = tempDir();
    const provider = startFakeProvider();
    try {
      const vars = env(dir.path, { OPENAI_BASE_URL: provider.url });
      const first = await task("chat", vars, "hello there\n");
      assert.equal(first.code, 0, first.stderr);
      assert.equal(provider.requests.length, 1);
      const db = vars.AGENT_DB_PATH;
      const before = Deno.readFileSync(db);
      const undo = makeUnwritable(db);
      let result;
      try {
        result = await task("chat", vars, "what is 12*(3+4)?\n");
      } finally {
        undo();
      }
      assertOneLine(
        result,
        new RegExp(`^Cannot open the session database ${db}: attempt to write a readonly database; `),
      );
      assert.equal(provider.requests.length, 1, "the second run asked the model nothing");
      assert.deepEqual(Deno.readFileSync(db), before);
    } finally {
      await provider.close();
    }
  },
});

Deno.test({
  name: "chat with an unwritable trace folder exits 2 with one line naming the trace file",
  ignore: !unwritable,
  fn: async () => {
    using dir = tempDir();
    const locked = join(dir.path, "trace-locked");
    Deno.mkdirSync(locked);
    const undo = makeUnwritable(locked);
    try {
      const vars = env(dir.path, {
        OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
        AGENT_TRACE_PATH: join(locked, "traces.jsonl"),
      });
      assertOneLine(
        await task("chat", vars, "hi\n"),
        new RegExp(`^Cannot write the trace file ${locked}/traces\\.jsonl: .*; .*AGENT_TRACE_PATH`),
      );
    } finally {
      undo();
    }
  },
});

Deno.test("serve on a port already in use exits 2 with one line naming the address and what to do", async () => {
  using dir = tempDir();
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = taken.addr.port;
    const vars = env(dir.path, { OPENAI_BASE_URL: "http://127.0.0.1:9/v1", AGENT_PORT: String(port) });
    assertOneLine(
      await task("serve", vars),
      new RegExp(
        `^Cannot listen on 127\\.0\\.0\\.1:${port} \\(AGENT_HOST, AGENT_PORT\\): the port is already in use; ` +
          ".*set AGENT_PORT to a free port",
      ),
    );
  } finally {
    taken.close();
  }
});

Deno.test("chat and serve reject values that cannot work with exit 2 and one line", async () => {
  using dir = tempDir();
  const cases: [string, Record<string, string>, RegExp][] = [
    [
      "serve",
      { AGENT_API_TOKENS: "short-token:alice" },
      /^Invalid AGENT_API_TOKENS=\(value hidden\): .*pair 1/,
    ],
    ["serve", { AGENT_MAX_BODY_BYTES: "100" }, /^Invalid AGENT_MAX_BODY_BYTES="100": expected at least 1024/],
    ["chat", { AGENT_STREAM: "yes" }, /^Invalid AGENT_STREAM="yes"/],
  ];
  for (const [name, extra, pattern] of cases) {
    const vars = env(dir.path, { OPENAI_BASE_URL: "http://127.0.0.1:9/v1", ...extra });
    assertOneLine(await task(name as "chat" | "serve", vars, "hi\n"), pattern);
  }
  assert.ok(!(await Array.fromAsync(Deno.readDir(dir.path))).some((e) => e.name === "db"), "nothing opened");
});

Deno.test("deno task chat accepts AGENT_STREAM=true", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const vars = env(dir.path, { OPENAI_BASE_URL: provider.url, AGENT_STREAM: "true" });
    const result = await task("chat", vars, "what is 12*(3+4)?\n");
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "The answer is 84.\n");
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat applies AGENT_MAX_TOOL_CALLS_PER_STEP from the environment", async () => {
  using dir = tempDir();
  const call = (i: number) => ({
    id: `call_${i}`,
    type: "function",
    function: { name: "calculator", arguments: JSON.stringify({ expression: `${i}+1` }) },
  });
  const provider = startFaultProvider([
    json(completion({ content: null, tool_calls: [call(1), call(2), call(3)] }, "tool_calls")),
  ]);
  try {
    const vars = env(dir.path, {
      OPENAI_BASE_URL: provider.url,
      AGENT_MAX_TOOL_CALLS_PER_STEP: "2",
      AGENT_STREAM: "0",
    });
    const result = await task("chat", vars, "add up\n");
    assert.equal(result.code, 0, result.stderr);
    const trace = Deno.readTextFileSync(vars.AGENT_TRACE_PATH).trim().split("\n").map((line) =>
      JSON.parse(line)
    );
    const results = trace.filter((e) => e.event === "tool_result").map((e) => [e.data.ok, e.data.error]);
    assert.equal(results.length, 3);
    assert.deepEqual(results.slice(0, 2), [[true, null], [true, null]]);
    assert.equal(results[2][0], false);
    assert.match(String(results[2][1]), /limit|2/);
  } finally {
    await provider.close();
  }
});

Deno.test("deno task chat rotates the trace at AGENT_TRACE_MAX_BYTES", async () => {
  using dir = tempDir();
  const provider = startFakeProvider();
  try {
    const vars = env(dir.path, { OPENAI_BASE_URL: provider.url, AGENT_TRACE_MAX_BYTES: "4096" });
    const questions = Array.from({ length: 12 }, (_, i) => `what is ${i}*(3+4)?`).join("\n") + "\n";
    const result = await task("chat", vars, questions);
    assert.equal(result.code, 0, result.stderr);
    const rotated = `${vars.AGENT_TRACE_PATH}.1`;
    assert.ok(Deno.statSync(rotated).size <= 4096, "the rotated file stayed within the limit");
    assert.ok(Deno.statSync(vars.AGENT_TRACE_PATH).size <= 4096);
  } finally {
    await provider.close();
  }
});

/** A fetch that answers GET /models with `status`, recording what it was asked. */
function modelsFetch(status: number) {
  const asked: { url: string; auth: string | null }[] = [];
  const fetch = (input: RequestInfo | URL, init?: RequestInit) => {
    asked.push({ url: String(input), auth: new Headers(init?.headers).get("authorization") });
    return Promise.resolve(new Response("{}", { status }));
  };
  return { fetch: fetch as typeof globalThis.fetch, asked };
}

Deno.test("probeProvider() says nothing of a provider that answers GET /models, or does not serve it", async () => {
  for (const status of [200, 404, 405, 500]) {
    const { fetch, asked } = modelsFetch(status);
    assert.equal(await probeProvider("http://127.0.0.1:11434/v1/", { fetch }), null, `HTTP ${status}`);
    assert.deepEqual(asked, [{ url: "http://127.0.0.1:11434/v1/models", auth: null }]);
  }
});

Deno.test("probeProvider() names a refused key by the URL's origin, never the key or the path", async () => {
  const { fetch, asked } = modelsFetch(401);
  const line = await probeProvider("https://api.example.com/v1/private", { apiKey: "sk-secret", fetch });
  assert.equal(
    line,
    "https://api.example.com refused the key (HTTP 401 to GET /models): check OPENAI_API_KEY",
  );
  assert.equal(asked[0].auth, "Bearer sk-secret");
});

Deno.test("probeProvider() asks Anthropic its own way: GET /v1/models with x-api-key and anthropic-version", async () => {
  // As Anthropic answers: its models list at /v1/models, a 401 in its words without its headers, 404 elsewhere.
  const asked: string[] = [];
  const fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
    const url = new URL(String(input));
    const headers = new Headers(init?.headers);
    asked.push(url.pathname);
    if (url.pathname !== "/v1/models") return Promise.resolve(new Response("{}", { status: 404 }));
    const ok = headers.get("x-api-key") === "sk-ant-good" && headers.get("anthropic-version") !== null;
    const error = { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } };
    return Promise.resolve(ok ? Response.json({ data: [] }) : Response.json(error, { status: 401 }));
  }) as typeof globalThis.fetch;
  const base = "https://api.anthropic.com";
  assert.equal(await probeProvider(base, { api: "anthropic", apiKey: "sk-ant-good", fetch }), null);
  assert.equal(
    await probeProvider(base, { api: "anthropic", apiKey: "sk-ant-bad", fetch }),
    "https://api.anthropic.com refused the key (HTTP 401 to GET /v1/models): check ANTHROPIC_API_KEY",
  );
  assert.deepEqual(asked, ["/v1/models", "/v1/models"]);
});

Deno.test("probeProvider() names a closed port and a provider that does not answer in time", async () => {
  const port = freePort();
  assert.equal(
    await probeProvider(`http://127.0.0.1:${port}/v1`),
    `cannot connect to http://127.0.0.1:${port}: connection refused`,
  );
  const silent =
    ((_input: RequestInfo | URL, init?: RequestInit) =>
      new Promise<Response>((_, reject) =>
        init?.signal?.addEventListener("abort", () => reject(init.signal!.reason), { once: true })
      )) as typeof globalThis.fetch;
  assert.equal(
    await probeProvider("http://127.0.0.1:1234/v1", { fetch: silent, timeoutMs: 10 }),
    "http://127.0.0.1:1234 did not answer GET /models within 0.01 s",
  );
});
