/**
 * What only the PostgreSQL store has: its versioned migrations, leases on the database's clock, the trace
 * table, and its behaviour when the database goes away and comes back (the shared behaviour is the store
 * suite's, run on both backends).
 */
import assert from "node:assert/strict";
import { StoreUnavailableError } from "../src/errors.ts";
import { migrate } from "../src/store/_postgres_schema.ts";
import { connect } from "../src/store/_postgres_client.ts";
import { parseDatabaseUrl } from "../src/database_url.ts";
import { PostgresStore } from "../src/store/postgres.ts";
import { SCHEMA_VERSION } from "../src/store/store.ts";
import { traceRow } from "../src/trace/shared_trace.ts";
import { keyOf, storedMessage as msg } from "./_harness.ts";
import { postgresCluster } from "./_postgres.ts";

const cluster = await postgresCluster();
/** For the outage test alone: stopping the run's shared cluster would pull it from under other files. */
const outage = await postgresCluster({ own: true });
const ignore = typeof cluster === "string";
const pg = () => {
  if (typeof cluster === "string") throw new Error(cluster);
  return cluster;
};

/** Runs `work` on a raw pool of `url` (what another program, or an older version, would do). */
async function withPool<T>(url: string, work: (sql: Awaited<ReturnType<typeof connect>>) => Promise<T>) {
  const sql = await connect(parseDatabaseUrl(url));
  try {
    return await work(sql);
  } finally {
    await sql.end();
  }
}

/**
 * Opens `url` (the store migrates it the rest of the way), runs `check` on the store, and then finds the
 * database at the current version, where migrating again does nothing.
 */
async function openMigrated(url: string, check: (store: PostgresStore) => Promise<void>): Promise<void> {
  const store = await PostgresStore.open(url);
  try {
    await check(store);
  } finally {
    await store.close();
  }
  await withPool(url, async (sql) => {
    assert.deepEqual([...await sql`SELECT version FROM agent_schema`], [{ version: SCHEMA_VERSION }]);
    assert.equal(await migrate(sql), SCHEMA_VERSION);
  });
}

// Earlier releases counted PostgreSQL's own steps: their 1 and 2 (recorded so by migrate(sql, 3) and
// migrate(sql, 4)) are the shared versions 3 and 4, and their 3 is the shared 5.
for (const [version, recorded] of [[3, 1], [4, 2]]) {
  Deno.test({
    name:
      `PostgresStore migrates a version-${version} database (recorded as ${recorded}) to the current version, keeping its rows`,
    ignore,
    async fn() {
      const url = await pg().freshUrl();
      await withPool(url, async (sql) => {
        assert.equal(await migrate(sql, version), 0);
        assert.deepEqual([...await sql`SELECT version FROM agent_schema`], [{ version: recorded }]);
        await sql`INSERT INTO sessions (user_id, id, summary, turn_count, created_at, updated_at)
          VALUES ('alice', 'old', '{"facts":["kept"]}', 1, 't0', 't1')`;
        if (version >= 4) {
          await sql`INSERT INTO session_leases (user_id, session_id, owner, expires_at)
            VALUES ('alice', 'old', 'gone', now() - interval '1 second')`;
        }
      });
      await openMigrated(url, async (store) => {
        const session = await store.get(keyOf("old", "alice"));
        assert.equal(session?.summary, '{"facts":["kept"]}');
        assert.equal(session?.turnCount, 1);
        assert.equal(
          (await store.acquireLease(keyOf("old", "alice"), "a", 1000)).taken,
          true,
          "version 4's table",
        );
        const event = { ts: "2026-01-01T00:00:00.000Z", user_id: "alice", session_id: "old", run_id: "r" };
        await store.trace.write([traceRow(event)!]);
        const page = await store.trace.page({
          userId: "alice",
          sessionId: "old",
          since: "2026-01-01T00:00:00.000Z",
          runId: null,
          limit: 10,
          cursor: null,
        });
        assert.equal(page.events.length, 1, "version 5's table");
      });
    },
  });
}

Deno.test({
  name:
    "PostgresStore migrates a database an earlier release recorded as its version 3 (the shared 5) to the current version",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      await migrate(sql, 5);
      await sql`UPDATE agent_schema SET version = 3`;
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
    });
    await openMigrated(url, async (store) => {
      assert.equal((await store.get(keyOf("old", "alice")))?.id, "old");
      // Version 6's column: a call's todo is added once.
      const key = keyOf("old", "alice");
      const first = await store.addTodo(key, "once", { callId: "m1/c1" });
      assert.deepEqual(await store.addTodo(key, "once", { callId: "m1/c1" }), first);
      assert.equal((await store.listTodos(key)).length, 1);
      // Version 7's tables: tokens by user, day and model, and by session.
      const usage = {
        day: "2026-01-01",
        model: "m",
        promptTokens: 3,
        cachedTokens: 0,
        cacheWriteTokens: 0,
        completionTokens: 1,
        calls: 1,
      };
      await store.recordUsage(key, [{ ...usage, estimatedCalls: 0 }]);
      assert.equal((await store.userUsage("alice"))[0].promptTokens, 3);
      assert.equal((await store.sessionUsage(key))[0].calls, 1);
      // Version 9's table: the user's memory, recalled by its words.
      await store.remember("alice", { items: ["Prefers green tea"], limit: 5 });
      assert.deepEqual((await store.recallMemory("alice", "tea?", 5)).map((r) => r.text), [
        "Prefers green tea",
      ]);
    });
  },
});

Deno.test({
  name: "PostgresStore migrates a version-8 database to the user's memory, keeping its rows",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      await migrate(sql, 8);
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
    });
    await openMigrated(url, async (store) => {
      assert.equal((await store.get(keyOf("old", "alice")))?.id, "old");
      await store.remember("alice", { items: ["Prefers green tea", "Has a dog"], limit: 5 }, {
        sessionId: "old",
      });
      assert.deepEqual((await store.recallMemory("alice", "which tea?", 5)).map((r) => r.text), [
        "Prefers green tea",
      ]);
      assert.equal((await store.listMemory("alice"))[0].sourceSession, "old");
    });
  },
});

Deno.test({
  name:
    "PostgresStore migrates a version-9 database to session titles: a session asked before is named from its " +
    "first question",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      await migrate(sql, 9);
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
      await sql`INSERT INTO messages (user_id, session_id, id, role, content, created_at)
        VALUES ('alice', 'old', ${new TextEncoder().encode("q1")}, 'user',
          ${new TextEncoder().encode("Old question?")}, ${new TextEncoder().encode("t0")})`;
    });
    await openMigrated(url, async (store) => {
      assert.equal((await store.get(keyOf("old", "alice")))?.title, null);
      await store.append(keyOf("old", "alice"), [msg("q2", "user", "New question")]);
      assert.equal((await store.get(keyOf("old", "alice")))?.title, "Old question?");
    });
  },
});

Deno.test({
  name: "PostgresStore migrates a version-11 database to cache-written tokens: old counts read 0 of them",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      await migrate(sql, 11);
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
      await sql`INSERT INTO usage_daily (user_id, day, model, prompt_tokens, completion_tokens, calls,
          estimated_calls, cached_tokens) VALUES ('alice', '2026-01-01', 'm', 10, 1, 1, 0, 4)`;
    });
    await openMigrated(url, async (store) => {
      const key = keyOf("old", "alice");
      assert.equal((await store.userUsage("alice"))[0].cacheWriteTokens, 0);
      const counts = {
        day: "2026-01-01",
        model: "m",
        promptTokens: 10,
        cachedTokens: 2,
        cacheWriteTokens: 6,
        completionTokens: 1,
        calls: 1,
        estimatedCalls: 0,
      };
      await store.recordUsage(key, [counts]);
      const [day] = await store.userUsage("alice");
      assert.deepEqual([day.promptTokens, day.cachedTokens, day.cacheWriteTokens], [20, 6, 6]);
      assert.deepEqual(await store.sessionUsage(key), [counts]);
    });
  },
});

Deno.test({
  name: "PostgresStore migrates a version-12 database to idempotency keys, keeping its rows",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      assert.equal(await migrate(sql, 12), 0);
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
    });
    await openMigrated(url, async (store) => {
      assert.equal((await store.get(keyOf("old", "alice")))?.id, "old");
      const key = { userId: "alice", key: "k1" };
      const claim = await store.claimRequest(key, "h");
      assert.ok(claim.state === "new", claim.state);
      const response = { status: 502, contentType: "application/json", body: '{"error":{}}' };
      assert.equal(await store.finishRequest(claim.held, response), true);
      assert.deepEqual(await store.claimRequest(key, "h"), { state: "done", response });
    });
  },
});

Deno.test({
  name: "PostgresStore migrates a version-13 database to kept responses, which go with their session",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      assert.equal(await migrate(sql, 13), 0);
      await sql`INSERT INTO sessions (user_id, id, created_at, updated_at) VALUES ('alice', 'old', 't0', 't1')`;
    });
    await openMigrated(url, async (store) => {
      const key = keyOf("old", "alice");
      assert.equal(await store.saveResponse(key, "resp_1", '{"id":"resp_1"}'), true);
      assert.equal(await store.saveResponse(keyOf("gone", "alice"), "resp_2", "{}"), false);
      assert.equal((await store.response("alice", "resp_1"))?.body, '{"id":"resp_1"}');
      assert.equal(await store.response("bob", "resp_1"), null);
      assert.equal(await store.deleteSession(key), true);
      assert.equal(await store.response("alice", "resp_1"), null);
    });
  },
});

Deno.test({
  name: "PostgresStore refuses a database written by a newer schema version, changing nothing",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      await migrate(sql);
      await sql`UPDATE agent_schema SET version = ${SCHEMA_VERSION + 1}`;
    });
    await assert.rejects(
      PostgresStore.open(url),
      new RegExp(`schema version is ${SCHEMA_VERSION + 1}, this program knows ${SCHEMA_VERSION}$`),
    );
  },
});

Deno.test({
  name: "PostgresStore migrates once when replicas start together",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    const stores = await Promise.all([1, 2, 3, 4].map(() => PostgresStore.open(url)));
    try {
      await stores[0].getOrCreate(keyOf("s"));
      assert.equal((await stores[3].get(keyOf("s")))?.id, "s");
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  },
});

Deno.test({
  name: "PostgresStore leases: one owner at a time, renewable by it, free again when released or expired",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    const a = await PostgresStore.open(url);
    const b = await PostgresStore.open(url);
    const key = keyOf("s");
    try {
      assert.equal((await a.acquireLease(key, "replica-a", 60_000)).taken, true);
      assert.equal((await b.acquireLease(key, "replica-b", 60_000)).taken, false, "held by a");
      assert.equal((await a.acquireLease(key, "replica-a", 60_000)).taken, true, "the owner takes it again");
      assert.equal(await b.renewLease(key, "replica-b", 60_000), false);
      assert.equal(await a.renewLease(key, "replica-a", 60_000), true);
      await b.releaseLease(key, "replica-b");
      assert.equal((await b.acquireLease(key, "replica-b", 60_000)).taken, false, "only the owner releases");
      assert.equal(await b.cancelLease(key), true, "b asks a to cancel");
      assert.equal(await b.cancelLease(key), true, "marked once");
      assert.equal(await a.renewLease(key, "replica-a", 60_000), false, "marked");
      assert.equal(await a.renewLease(key, "replica-a!cancel", 60_000), true);
      assert.equal(
        (await a.acquireLease(key, "replica-a", 60_000, { from: "replica-a!cancel" })).taken,
        true,
      );
      assert.equal(await b.cancelLease(key), true, "marked anew");
      await a.releaseLease(key, "replica-a");
      assert.equal(await b.cancelLease(key), false, "released while marked: none to mark");
      assert.equal((await b.acquireLease(key, "replica-b", 60_000)).taken, true, "free once released");
      assert.equal(
        (await a.acquireLease(keyOf("s", "other-user"), "replica-a", 60_000)).taken,
        true,
        "per user",
      );
      // A minute passes for b's lease: its expiry, on the database's clock, moves a minute back.
      await withPool(url, (sql) =>
        sql`UPDATE session_leases SET expires_at = expires_at - interval '1 minute'
          WHERE user_id = ${key.userId} AND session_id = ${key.sessionId}`);
      assert.equal((await a.acquireLease(key, "replica-a", 60_000)).taken, true, "free once expired");
      assert.equal(await b.renewLease(key, "replica-b", 60_000), false, "lost: expired and taken");
      await assert.rejects(a.acquireLease(key, "replica-a", 0), RangeError);
      await assert.rejects(a.acquireLease(keyOf("bad id"), "replica-a", 1), /Invalid session id/);
    } finally {
      await a.close();
      await b.close();
    }
  },
});

Deno.test({
  name: "PostgresStore leases: of many replicas racing for a free lease exactly one wins",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    const stores = await Promise.all([0, 1, 2, 3].map(() => PostgresStore.open(url)));
    try {
      for (let round = 0; round < 5; round++) {
        const key = keyOf(`race-${round}`);
        const won = await Promise.all(stores.map((store, i) => store.acquireLease(key, `r${i}`, 60_000)));
        assert.equal(won.filter((take) => take.taken).length, 1, JSON.stringify(won));
      }
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  },
});

Deno.test({
  name: "PostgresStore trace table pages a session's events in order, by run and from the session's start",
  ignore,
  async fn() {
    const store = await PostgresStore.open(await pg().freshUrl());
    try {
      const event = (i: number, session = "s", run = "r1") => ({
        ts: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
        user_id: "u",
        session_id: session,
        run_id: run,
        event: "tool_call",
        data: { i, text: "nul\u0000 and 😀" },
      });
      // An event that names no session (no envelope) has no row.
      const rows = (events: Record<string, unknown>[]) =>
        events.map((e) => traceRow(e)).filter((r) => r !== null);
      await store.trace.write(
        rows([event(0), event(1, "other"), event(2), { no: "envelope" }, event(3, "s", "r2")]),
      );
      await store.trace.write(rows([event(4)]));
      const query = { userId: "u", sessionId: "s", since: event(1).ts, runId: null, limit: 2, cursor: null };
      const first = await store.trace.page(query);
      assert.deepEqual(first.events, [event(2), event(3, "s", "r2")]);
      const second = await store.trace.page({ ...query, cursor: first.nextCursor });
      assert.deepEqual(second, { events: [event(4)], nextCursor: null, endCursor: 6 });
      const r2 = await store.trace.page({ ...query, since: event(0).ts, runId: "r2" });
      assert.deepEqual(r2.events.map((e) => e.data), [event(3).data]);
      assert.deepEqual((await store.trace.page({ ...query, userId: "v" })).events, []);
      await store.trace.prune(2);
      const left = await store.trace.page({ ...query, since: event(0).ts, limit: 10 });
      assert.deepEqual(left.events, [event(3, "s", "r2"), event(4)], "the newest 2 of the table's 5 kept");
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name: "PostgresStore fails while the database is down, storing nothing, and works again once it is back",
  ignore: typeof outage === "string",
  async fn() {
    if (typeof outage === "string") throw new Error(outage);
    const db = outage;
    const url = (await db.freshUrl()).replace("postgres@", "postgres:pw-SENTINEL@");
    const store = await PostgresStore.open(url);
    try {
      await store.getOrCreate(keyOf("s"));
      await store.append(keyOf("s"), [msg("1", "user", "before")]);
      await db.stop();
      const turn = [
        msg("2", "assistant", null, { toolCalls: [{ id: "c", name: "calculator", arguments: "{}" }] }),
        msg("3", "tool", "{}", { toolCallId: "c" }),
      ];
      const failure = await store.append(keyOf("s"), turn).then(() => null, (error) => error);
      assert.ok(failure instanceof StoreUnavailableError, String(failure));
      assert.match(
        failure.message,
        new RegExp(
          `^Cannot append of session "s": the session database postgres://postgres@127\\.0\\.0\\.1:${db.port}/postgres is unavailable`,
        ),
      );
      assert.doesNotMatch(failure.message, /SENTINEL/);
      assert.equal(await store.ping(), false);
      await db.start();
      assert.equal(await store.ping(), true);
      assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.id), ["1"], "nothing half-stored");
      assert.equal(await store.append(keyOf("s"), turn), 2);
      assert.equal((await store.get(keyOf("s")))?.turnCount, 1);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name: "PostgresStore.open() names an unreachable database without its password",
  ignore,
  async fn() {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (listener.addr as Deno.NetAddr).port;
    listener.close();
    const error = await PostgresStore.open(`postgres://agent:pw-SENTINEL@127.0.0.1:${port}/agent`)
      .then(() => null, (error) => error);
    assert.ok(error instanceof StoreUnavailableError, String(error));
    assert.equal(
      error.message,
      `Cannot open the session database: the session database postgres://agent@127.0.0.1:${port}/agent ` +
        "is unavailable (connection refused)",
    );
  },
});

Deno.test({
  name:
    "PostgresStore migrates a version-10 database to provider state and cached tokens: old messages read without state, new ones keep theirs",
  ignore,
  async fn() {
    const url = await pg().freshUrl();
    await withPool(url, async (sql) => {
      assert.equal(await migrate(sql, 10), 0);
      await sql`INSERT INTO sessions (user_id, id, summary, turn_count, created_at, updated_at)
        VALUES ('alice', 'old', NULL, 1, 't0', 't1')`;
      await sql`INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at)
        VALUES ('alice', 'old', ${new TextEncoder().encode("m1")}, 'user', ${new TextEncoder().encode("hi")},
          NULL, NULL, ${new TextEncoder().encode("t0")})`;
    });
    await openMigrated(url, async (store) => {
      const key = keyOf("old", "alice");
      const [old] = await store.messages(key);
      assert.equal(old.content, "hi");
      assert.equal(old.providerState, undefined);
      const providerState = {
        origin: "https://api.deepseek.com deepseek-v4-pro",
        message: { reasoning_content: "r" },
      };
      await store.append(key, [msg("m2", "assistant", "ok", { providerState })]);
      assert.deepEqual((await store.messages(key))[1].providerState, providerState);
    });
  },
});
