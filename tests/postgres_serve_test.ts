/**
 * `deno task serve` on PostgreSQL (a throwaway cluster of this file's own, since it stops and starts it), with
 * the task's own permission flags: a database down at start-up, a database that goes away in the middle of a
 * turn and comes back, and two replicas that share sessions and traces. A sentinel password is in every URL and
 * must show nowhere.
 */
import assert from "node:assert/strict";
import { PostgresStore } from "../src/store/postgres.ts";
import { readTrace } from "../src/trace/trace.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, keyOf, type ServeProcess, spawnServe, tempDir } from "./_harness.ts";
import { postgresCluster } from "./_postgres.ts";

const cluster = await postgresCluster({ own: true });
const ignore = typeof cluster === "string";
const SENTINEL = "pw-SENTINEL-4711";

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** The cluster's URL for a new schema, with the sentinel password (trust authentication ignores it). */
async function databaseUrl(): Promise<string> {
  if (typeof cluster === "string") throw new Error(cluster);
  return (await cluster.freshUrl()).replace("postgres@", `postgres:${SENTINEL}@`);
}

function post(port: number, session: string, message: string): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A replica: `deno task serve` on `url` and a port it picks, its trace in `dir`. */
async function replica(dir: string, url: string, provider: string): Promise<ServeProcess> {
  const serve = spawnServe(
    ["task", "serve"],
    childEnv(dir, {
      AGENT_PORT: "0",
      OPENAI_BASE_URL: provider,
      AGENT_DATABASE_URL: url,
      NO_COLOR: "1",
    }),
  );
  await serve.listening;
  assert.match(serve.stderr(), /listening on/, serve.stderr());
  return serve;
}

Deno.test("deno task serve with AGENT_DATABASE_URL of a database that is down exits 2 with one line", async () => {
  using dir = tempDir();
  const port = freePort();
  const serve = spawnServe(
    ["task", "serve"],
    childEnv(dir.path, {
      AGENT_PORT: "0",
      OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
      AGENT_DATABASE_URL: `postgres://agent:${SENTINEL}@127.0.0.1:${port}/agent`,
      NO_COLOR: "1",
    }),
  );
  await serve.listening; // its stderr ended: it exited
  const code = await serve.stop();
  const lines = serve.stderr().split("\n").filter((line) => line !== "" && !line.startsWith("Task "));
  assert.equal(code, 2, serve.stderr());
  assert.deepEqual(lines, [
    `Cannot open the session database: the session database postgres://agent@127.0.0.1:${port}/agent is ` +
    "unavailable (connection refused); start PostgreSQL there or set AGENT_DATABASE_URL to a reachable database",
  ]);
});

Deno.test({
  name:
    "serve on PostgreSQL: a database gone mid-turn ends the turn in error, stores half of nothing, and the server recovers",
  ignore,
  async fn() {
    if (typeof cluster === "string") return;
    using dir = tempDir();
    const provider = startFakeProvider();
    const url = await databaseUrl();
    const serve = await replica(dir.path, url, provider.url);
    try {
      const first = await post(serve.port(), "s", "what is 6*7?");
      assert.equal(first.status, 200);
      assert.equal((await first.json()).answer, "The answer is 42.");

      // The model answers slowly; the database stops meanwhile.
      let release!: () => void;
      provider.hold = new Promise((resolve) => release = resolve);
      const asked = provider.requests.length;
      const pending = post(serve.port(), "s", "say: too late");
      await until(() => provider.requests.length > asked, "the model call");
      await cluster.stop();
      release();
      provider.hold = null;
      const failed = await pending;
      const body = await failed.json();
      assert.equal(failed.status, 503, JSON.stringify(body));
      assert.equal(body.error.code, "store_unavailable");
      assert.match(
        body.error.message,
        new RegExp(`postgres://postgres@127\\.0\\.0\\.1:${cluster.port}/postgres is unavailable`),
      );
      assert.ok(body.error.run_id);

      const health = await fetch(`http://127.0.0.1:${serve.port()}/healthz`);
      assert.equal(health.status, 503);
      assert.equal((await health.json()).db, "unavailable");
      const refused = await post(serve.port(), "s", "anyone there?");
      assert.equal(refused.status, 503);
      assert.equal((await refused.json()).error.code, "store_unavailable");

      await cluster.start();
      const healthy = await fetch(`http://127.0.0.1:${serve.port()}/healthz`);
      assert.deepEqual([healthy.status, (await healthy.json()).db], [200, "ok"]);
      const after = await post(serve.port(), "s", "what is 2*3?");
      assert.equal(after.status, 200);
      assert.equal((await after.json()).answer, "The answer is 6.");

      const store = await PostgresStore.open(url);
      try {
        const messages = await store.messages(keyOf("s", "local"));
        // The question stored before the outage stays, unanswered, for a retry; nothing else of that turn.
        assert.deepEqual(messages.map((m) => [m.role, m.content ?? "(calls)"]), [
          ["user", "what is 6*7?"],
          ["assistant", "(calls)"],
          ["tool", messages[2].content],
          ["assistant", "The answer is 42."],
          ["user", "say: too late"],
          ["user", "what is 2*3?"],
          ["assistant", "(calls)"],
          ["tool", messages[7].content],
          ["assistant", "The answer is 6."],
        ]);
        assert.equal((await store.get(keyOf("s", "local")))?.turnCount, 3);
      } finally {
        await store.close();
      }
      const errors = readTrace(`${dir.path}/trace/traces.jsonl`).filter((e) => e.event === "error");
      assert.deepEqual(errors.map((e) => (e.data as { kind: string }).kind), ["store"]);
    } finally {
      const code = await serve.stop();
      await provider.close();
      assert.equal(code, 0, serve.stderr());
    }
    assert.ok(!serve.stderr().includes(SENTINEL), serve.stderr());
    assert.ok(!Deno.readTextFileSync(`${dir.path}/trace/traces.jsonl`).includes(SENTINEL));
  },
});

Deno.test({
  name: "two serve replicas on one PostgreSQL database serve each other's sessions and traces",
  ignore,
  async fn() {
    using dirA = tempDir();
    using dirB = tempDir();
    const provider = startFakeProvider();
    const url = await databaseUrl();
    const a = await replica(dirA.path, url, provider.url);
    const b = await replica(dirB.path, url, provider.url);
    try {
      const one = await (await post(a.port(), "shared", "what is 6*7?")).json();
      const two = await (await post(b.port(), "shared", "say: second turn, other replica")).json();
      assert.deepEqual([one.turn, two.turn], [1, 2]);
      const session = await (await fetch(`http://127.0.0.1:${a.port()}/v1/sessions/shared`)).json();
      assert.equal(session.turn_count, 2);
      assert.equal(session.messages.at(-1).content, "second turn, other replica");
      for (const port of [a.port(), b.port()]) {
        const trace = await (await fetch(`http://127.0.0.1:${port}/v1/sessions/shared/trace`)).json();
        const runs = trace.events.filter((e: { event: string }) => e.event === "run_end")
          .map((e: { run_id: string }) => e.run_id);
        assert.deepEqual(runs, [one.run_id, two.run_id], `replica on ${port}`);
      }
      // A cursor from one replica goes on at the other.
      const base = "/v1/sessions/shared/trace";
      const all = await (await fetch(`http://127.0.0.1:${a.port()}${base}`)).json();
      const paged = await (await fetch(`http://127.0.0.1:${b.port()}${base}?limit=2`)).json();
      const rest = await (await fetch(`http://127.0.0.1:${a.port()}${base}?cursor=${paged.next_cursor}`))
        .json();
      assert.deepEqual([...paged.events, ...rest.events], all.events);
    } finally {
      const codes = [await a.stop(), await b.stop()];
      await provider.close();
      assert.deepEqual(codes, [0, 0], a.stderr() + b.stderr());
    }
  },
});
