/**
 * The daily token quota across two `serve` replicas on one database, SQLite file and PostgreSQL alike: each
 * replica reads the tokens the other counted, so a user under the quota in each process's own count is
 * refused by both once their sum reaches it; `GET /v1/usage` on either shows the sum.
 */
import assert from "node:assert/strict";
import { tempDir } from "./_harness.ts";
import { replicaBackends, startReplicas } from "./_replicas.ts";
import { startFakeProvider } from "./fixtures/fake_openai.ts";

const BACKENDS = await replicaBackends();

function ask(url: string, session: string, message: string): Promise<Response> {
  return fetch(`${url}/v1/sessions/${session}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
}

function complete(url: string, message: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "mini-agent", messages: [{ role: "user", content: message }] }),
  });
}

/** The response's status, its body read. */
async function statusOf(response: Promise<Response>): Promise<number> {
  const answered = await response;
  await answered.body?.cancel();
  return answered.status;
}

for (const { name, ignore, make } of BACKENDS) {
  Deno.test({
    name: `two serve replicas on one ${name} hold one daily quota per user: the sum of their counts`,
    ignore,
    fn: async () => {
      const backend = await make();
      using dir = tempDir();
      const provider = startFakeProvider();
      // Every model call of the fake provider reports 15 tokens: one turn per replica stays under 20 in each
      // replica's own count, their sum passes it.
      const env = { OPENAI_BASE_URL: provider.url, AGENT_USER_DAILY_TOKENS: "20" };
      const [a, b] = await startReplicas(2, backend, dir.path, { env });
      try {
        assert.equal(await statusOf(ask(a.url, "one", "hello")), 200);
        assert.equal(await statusOf(complete(b.url, "hello")), 200);
        for (const refused of [await ask(a.url, "one", "again"), await complete(a.url, "again")]) {
          assert.equal(refused.status, 429);
          assert.ok(Number(refused.headers.get("retry-after")) > 0);
          assert.equal((await refused.json()).error.code, "quota_exceeded");
        }
        assert.equal(await statusOf(ask(b.url, "two", "again")), 429);
        assert.equal(provider.requests.length, 2, "no refused turn reached the model");
        const usage = await (await fetch(`${a.url}/v1/usage`)).json();
        assert.equal(usage.today.total_tokens, 30);
        assert.equal(usage.today.left, 0);
        assert.equal(usage.days[0].models[0].calls, 2);
      } finally {
        await Promise.all([a.serve.stop(), b.serve.stop()]);
        await provider.close();
      }
    },
  });
}
