/**
 * `deno task serve` killed with SIGKILL while an MCP tool runs, then started again on the same database, SQLite
 * and PostgreSQL: the tool's effect is a line in a file its server appends to, outside every process. Killed
 * during a tool that is not safe to repeat, the retry answers it interrupted and the line is there once; during
 * a safe one (`idempotentHint`), it runs again and the turn answers; during an approved call, approving again
 * is refused and the retry does not repeat it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { INTERRUPTED_ERROR } from "../src/agent/loop.ts";
import { taskPermissionFlags } from "../src/permissions.ts";
import { freePort } from "../scripts/_bench_process.ts";
import { childEnv, ROOT, type ServeProcess, spawnServe, tempDir } from "./_harness.ts";
import { postgresCluster } from "./_postgres.ts";

const cluster = await postgresCluster();
const FIXTURE = join(ROOT, "tests/fixtures/mcp_effect_server.ts");

/** A model that calls `fx__<word>` for a user message `<word>`, and answers with what a tool result said. */
function effectModel() {
  const toolResults: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const body = await request.json();
    const last = body.messages.at(-1);
    const message = last.role === "tool"
      ? { role: "assistant", content: `the tool said: ${toolResults[toolResults.push(last.content) - 1]}` }
      : {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: `call_${last.content}`,
          type: "function",
          function: { name: `fx__${last.content}`, arguments: JSON.stringify({ text: "effect" }) },
        }],
      };
    const finish = message.content === null ? "tool_calls" : "stop";
    return Response.json({
      id: "c",
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [{ index: 0, message, finish_reason: finish }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, toolResults, close: () => server.shutdown() };
}

interface Rig {
  dir: string;
  effect: string;
  start(): Promise<ServeProcess & { port: number }>;
}

/** `serve` on `database` (a SQLite file in `dir` when null), with the effect server and the model. */
function rig(dir: string, database: string | null, modelUrl: string, approval: unknown): Rig {
  const effect = join(dir, "effect.txt");
  Deno.writeTextFileSync(effect, "");
  const env = { MCP_EFFECT_FILE: effect, MCP_MARKER_FILE: join(dir, "marker") };
  const server = {
    command: "deno",
    args: ["run", "--quiet", "--allow-read", "--allow-write", "--allow-env", FIXTURE],
    env,
  };
  const config = join(dir, "mcp.json");
  Deno.writeTextFileSync(config, JSON.stringify({ mcpServers: { fx: server }, approval }));
  return {
    dir,
    effect,
    async start() {
      const port = freePort();
      const env = childEnv(dir, {
        AGENT_PORT: String(port),
        OPENAI_BASE_URL: modelUrl,
        AGENT_MCP_CONFIG: config,
        AGENT_STREAM: "0",
        NO_COLOR: "1",
        ...(database === null ? {} : { AGENT_DATABASE_URL: database }),
      });
      // `deno run` with the task's own flags, not `deno task`: the kill must hit `serve` itself.
      const flags = taskPermissionFlags(env, { task: "serve" });
      const args = ["run", "--no-prompt", "--config", `${ROOT}/deno.json`, ...flags, "src/main.ts", "serve"];
      const serve = spawnServe(args, env);
      await serve.listening;
      assert.match(serve.stderr(), /listening on/, serve.stderr());
      return Object.assign(serve, { port });
    },
  };
}

function post(port: number, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/sessions/s1${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}

function effectLines(rig: Rig): string[] {
  return Deno.readTextFileSync(rig.effect).split("\n").filter((line) => line !== "");
}

/** Waits (polling, bounded) until the effect file has `count` lines. */
async function effectsReach(rig: Rig, count: number, debug = () => ""): Promise<void> {
  for (let i = 0; i < 1000 && effectLines(rig).length < count; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.equal(effectLines(rig).length, count, `the tool took effect (${debug()})`);
}

/** Sends `body` to `path`, waits for the tool's effect, then kills the process mid-call. */
async function killDuringTool(rig: Rig, serve: ServeProcess & { port: number }, path: string, body: unknown) {
  const cut = new AbortController();
  const request = post(serve.port, path, body, cut.signal).catch(() => null);
  await effectsReach(rig, effectLines(rig).length + 1, () => serve.stderr());
  serve.child.kill("SIGKILL");
  assert.equal((await serve.child.status).signal, "SIGKILL");
  cut.abort();
  await request;
  await serve.stop();
}

const backends: { name: string; ignore: boolean; database: () => Promise<string | null> }[] = [
  { name: "SQLite", ignore: false, database: () => Promise.resolve(null) },
  {
    name: "PostgreSQL",
    ignore: typeof cluster === "string",
    database: () => typeof cluster === "string" ? Promise.reject(new Error(cluster)) : cluster.freshUrl(),
  },
];

/** One kill case: `kill` drives the first `serve` to its kill; the second answers the retry, checked by `check`. */
interface KillCase {
  name: string;
  approval?: unknown;
  kill(rig: Rig, first: ServeProcess & { port: number }): Promise<(port: number) => Promise<void>>;
  check(rig: Rig, answer: string, toolResults: unknown[]): void;
}

const CASES: KillCase[] = [
  {
    name: "during a tool not safe to repeat: the retry answers it interrupted, the effect once",
    async kill(rig, first) {
      await killDuringTool(rig, first, "/messages", { message: "append" });
      return async () => {};
    },
    check(rig, _answer, toolResults) {
      assert.deepEqual(effectLines(rig), ["effect"], "not run again");
      assert.deepEqual(toolResults.map((t) => (t as { error: string }).error), [INTERRUPTED_ERROR]);
    },
  },
  {
    name: "during a tool safe to repeat: the retry runs it again and answers",
    async kill(rig, first) {
      await killDuringTool(rig, first, "/messages", { message: "count" });
      return async () => {};
    },
    check(rig, answer, toolResults) {
      assert.match(answer, /counted 2/);
      assert.deepEqual(effectLines(rig), ["count", "count"], "run again, once");
      assert.deepEqual(toolResults.map((t) => (t as { ok: boolean }).ok), [true]);
    },
  },
  {
    name: "during an approved call: approving again is refused and the retry does not repeat it",
    approval: { tools: { fx__append: "ask" } },
    async kill(rig, first) {
      const asked = await (await post(first.port, "/messages", { message: "append" })).json();
      assert.equal(asked.outcome, "awaiting_approval", JSON.stringify(asked));
      const decisions = { decisions: { [asked.approval.calls[0].id]: "approve" } };
      await killDuringTool(rig, first, "/approvals", decisions);
      return async (port) => {
        const again = await post(port, "/approvals", decisions);
        assert.equal(again.status, 409);
        assert.equal((await again.json()).error.code, "no_pending_approval");
      };
    },
    check(rig, _answer, toolResults) {
      assert.deepEqual(effectLines(rig), ["effect"], "started once");
      assert.deepEqual(toolResults.map((t) => (t as { error: string }).error), [INTERRUPTED_ERROR]);
    },
  },
];

for (const backend of backends) {
  for (const killCase of CASES) {
    Deno.test({
      name: `${backend.name}: serve killed ${killCase.name}`,
      ignore: backend.ignore,
      async fn() {
        using dir = tempDir();
        const model = effectModel();
        const r = rig(dir.path, await backend.database(), model.url, killCase.approval);
        let second: (ServeProcess & { port: number }) | null = null;
        try {
          const afterRestart = await killCase.kill(r, await r.start());
          second = await r.start();
          await afterRestart(second.port);
          const response = await post(second.port, "/retry", {});
          const body = await response.json();
          assert.equal(response.status, 200, JSON.stringify(body));
          assert.equal(body.outcome, "answered");
          killCase.check(r, body.answer, model.toolResults.map((t) => JSON.parse(t)));
        } finally {
          await second?.stop();
          await model.close();
        }
      },
    });
  }
}
