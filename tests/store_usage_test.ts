/**
 * Tokens counted in the store, on SQLite and PostgreSQL: per user, UTC day and model (what the daily quota
 * and `GET /v1/usage` read), and per session and model (what chat's `/usage` reads), the prompt tokens read
 * from the provider's cache and those written to it beside the others; written with the messages a call produced, added up across
 * connections, never taken back by a discard.
 */
import assert from "node:assert/strict";
import type { UsageEntry } from "../src/types.ts";
import { keyOf, steppingClock, storedMessage as msg } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const ALICE = keyOf("s1", "alice");

function entry(
  day: string,
  model: string,
  prompt: number,
  completion: number,
  estimated = 0,
  cached = 0,
  written = 0,
): UsageEntry {
  return {
    day,
    model,
    promptTokens: prompt,
    cachedTokens: cached,
    cacheWriteTokens: written,
    completionTokens: completion,
    calls: 1,
    estimatedCalls: estimated,
  };
}

storeTest(
  "$Store counts tokens with an append by user, day and model, and by session and model, cached and cache-written ones too",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.append(ALICE, [msg("m1", "user", "hi")], {
        usage: [entry("2026-01-01", "gpt", 10, 2, 0, 8, 2)],
      });
      await store.append(ALICE, [msg("m2", "assistant", "yo")], {
        usage: [entry("2026-01-01", "gpt", 20, 3, 0, 15, 4), entry("2026-01-02", "mini", 5, 1, 1)],
      });
      // Both appends' rows, added up by day and model.
      const totals = [
        { ...entry("2026-01-01", "gpt", 30, 5, 0, 23, 6), calls: 2 },
        entry("2026-01-02", "mini", 5, 1, 1),
      ];
      assert.deepEqual(await store.userUsage("alice"), totals);
      assert.deepEqual(
        (await store.userUsage("alice", { from: "2026-01-02", to: "2026-01-02" })).map((r) => r.model),
        ["mini"],
      );
      assert.deepEqual(await store.sessionUsage(ALICE), totals);
      assert.deepEqual(await store.userUsage("bob"), []);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store keeps the tokens when the messages are discarded or the session deleted, the user's day only",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.append(ALICE, [msg("m1", "user", "hi")], { usage: [entry("2026-01-01", "gpt", 10, 2)] });
      await store.discardMessages(ALICE, ["m1"]);
      assert.equal(
        (await store.sessionUsage(ALICE))[0].promptTokens,
        10,
        "spent is spent: a discard keeps it",
      );
      await store.deleteSession(ALICE);
      assert.deepEqual(await store.sessionUsage(ALICE), [], "the session's totals go with it");
      assert.equal((await store.userUsage("alice"))[0].promptTokens, 10, "the user's day stays");
      // A session started again under that id starts from nothing.
      await store.getOrCreate(ALICE);
      assert.deepEqual(await store.sessionUsage(ALICE), []);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store records tokens alone: the user's day always, the session's only when it exists",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      const gone = keyOf("ephemeral-1", "alice");
      await store.recordUsage(gone, [entry("2026-01-01", "gpt", 7, 1, 0, 5, 1)]);
      assert.equal((await store.userUsage("alice"))[0].promptTokens, 7);
      assert.equal((await store.userUsage("alice"))[0].cachedTokens, 5);
      assert.equal((await store.userUsage("alice"))[0].cacheWriteTokens, 1);
      assert.equal(await store.get(gone), null, "no session is made for the count");
      await store.getOrCreate(ALICE);
      await store.recordUsage(ALICE, [entry("2026-01-01", "gpt", 3, 1, 0, 2, 1)]);
      assert.equal((await store.userUsage("alice"))[0].promptTokens, 10);
      assert.equal((await store.userUsage("alice"))[0].cachedTokens, 7);
      assert.equal((await store.userUsage("alice"))[0].cacheWriteTokens, 2);
      assert.equal((await store.sessionUsage(ALICE))[0].promptTokens, 3);
      assert.equal((await store.sessionUsage(ALICE))[0].cachedTokens, 2);
      assert.equal((await store.sessionUsage(ALICE))[0].cacheWriteTokens, 1);
      await store.savePending(ALICE, {
        runId: "r",
        turn: 1,
        step: 0,
        seq: 1,
        content: null,
        toolCalls: [{ id: "c", name: "calculator", arguments: "{}" }],
        asked: ["c"],
        createdAt: "2026-01-01T00:00:00.000Z",
      }, { usage: [entry("2026-01-01", "gpt", 100, 0, 0, 64, 30)] });
      assert.equal((await store.sessionUsage(ALICE))[0].promptTokens, 103, "with the pending step too");
      assert.equal((await store.sessionUsage(ALICE))[0].cachedTokens, 66);
      assert.equal((await store.sessionUsage(ALICE))[0].cacheWriteTokens, 31);
    } finally {
      await store.close();
    }
  },
);

// SQLite's connections of one process block each other (its calls are synchronous): two processes write one
// file in the replicas test instead.
storeTest("$Store adds up counts written at once from two connections", async (db) => {
  const [one, two] = [await db.open(), await db.open()];
  try {
    await one.getOrCreate(ALICE);
    const writes = Array.from({ length: 20 }, (_, i) => {
      const store = i % 2 === 0 ? one : two;
      return store.recordUsage(ALICE, [entry("2026-01-01", "gpt", 1, 1)]);
    });
    await Promise.all(writes);
    const [row] = await two.userUsage("alice");
    assert.deepEqual([row.promptTokens, row.completionTokens, row.calls], [20, 20, 20]);
    assert.equal((await one.sessionUsage(ALICE))[0].calls, 20);
  } finally {
    await one.close();
    await two.close();
  }
}, { only: ["PostgresStore"] });

storeTest(
  "$Store refuses counts that are not whole numbers, more cached and cache-written than prompt tokens, or a malformed day, changing nothing",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(ALICE);
      for (
        const bad of [
          entry("2026-01-01", "gpt", -1, 0),
          entry("2026-01-01", "gpt", 1.5, 0),
          entry("2026-01-01", "gpt", 10, 0, 0, -1),
          entry("2026-01-01", "gpt", 10, 0, 0, 11),
          entry("2026-01-01", "gpt", 10, 0, 0, 0, -1),
          entry("2026-01-01", "gpt", 10, 0, 0, 0, 0.5),
          entry("2026-01-01", "gpt", 10, 0, 0, 6, 5),
          entry("1/1/26", "gpt", 1, 0),
        ]
      ) {
        await assert.rejects(store.append(ALICE, [msg("m1", "user", "hi")], { usage: [bad] }), TypeError);
      }
      assert.deepEqual(await store.messages(ALICE), [], "the append went with its counts");
      assert.deepEqual(await store.userUsage("alice"), []);
    } finally {
      await store.close();
    }
  },
);
