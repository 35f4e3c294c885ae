/**
 * The user's memory in the store, on SQLite and PostgreSQL: written with a compaction in its transaction (or
 * not at all), folded by normalized text, kept to the item limit least recently used first, recalled by
 * relevance within one user's items only, listed and erased apart from sessions.
 */
import assert from "node:assert/strict";
import { keyOf, steppingClock, storedMessage as msg } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const ALICE = keyOf("s1", "alice");

storeTest(
  "$Store.applyCompaction() writes the user's memory in its transaction, with its source session",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.append(ALICE, [msg("1", "user", "a"), msg("2", "assistant", "b"), msg("3", "user", "c")]);
      const written = await store.applyCompaction(ALICE, '{"facts":["x"]}', ["1", "2"], 1, {
        memory: { items: ["Likes green tea", "Lives in Oslo"], limit: 200 },
      });
      assert.equal(written?.added, 2);
      assert.equal(written?.evicted, 0);
      const items = await store.listMemory("alice");
      assert.deepEqual(items.map((i) => [i.text, i.sourceSession, i.useCount]), [
        ["Likes green tea", "s1", 0],
        ["Lives in Oslo", "s1", 0],
      ]);
      assert.deepEqual(written?.ids, items.map((i) => i.id));
      assert.equal(items[0].firstSeen, items[0].lastSeen);
      assert.deepEqual(await store.listMemory("bob"), [], "another user has none");
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store.applyCompaction() that fails writes nothing to the user's memory", async (db) => {
  const store = await db.open();
  try {
    await store.getOrCreate(ALICE);
    await store.append(ALICE, [msg("1", "user", "a"), msg("2", "user", "b")]);
    const memory = { items: ["Likes green tea"], limit: 200 };
    await assert.rejects(
      async () => await store.applyCompaction(ALICE, "{}", ["1", "missing"], 1, { memory }),
      /message "missing" is not stored/,
    );
    await assert.rejects(
      async () => await store.applyCompaction(ALICE, "{}", ["1"], 1, { previous: "changed", memory }),
      /summary changed meanwhile/,
    );
    assert.deepEqual(await store.listMemory("alice"), []);
    assert.equal((await store.messages(ALICE)).length, 2);
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store.remember() folds items equal but for case and spaces, keeping the first spelling and source",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      const first = await store.remember("alice", { items: ["Likes  green tea"], limit: 200 }, {
        sessionId: "s1",
      });
      const again = await store.remember("alice", {
        items: ["likes GREEN tea ", "Likes green tea"],
        limit: 200,
      }, {
        sessionId: "s2",
      });
      assert.deepEqual(again, { ids: first.ids, added: 0, evicted: 0 });
      const [item] = await store.listMemory("alice");
      assert.equal(item.text, "Likes  green tea");
      assert.equal(item.sourceSession, "s1");
      assert.ok(item.lastSeen > item.firstSeen, "seen again later");
      // The same words are another user's own item.
      const bob = await store.remember("bob", { items: ["likes green tea"], limit: 200 });
      assert.equal(bob.added, 1);
      assert.notDeepEqual(bob.ids, first.ids);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store keeps at most the item limit per user, the least recently used leaving first",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.remember("alice", { items: ["one", "two", "three"], limit: 3 });
      const [one] = (await store.listMemory("alice")).filter((i) => i.text === "one");
      // "one" is recalled, so "two" is now the least recently used.
      await store.useMemory("alice", [one.id]);
      const written = await store.remember("alice", { items: ["four"], limit: 3 });
      assert.equal(written.evicted, 1);
      assert.deepEqual((await store.listMemory("alice")).map((i) => i.text), ["one", "three", "four"]);
      assert.equal((await store.listMemory("alice"))[0].useCount, 1);
      await store.remember("bob", { items: ["b1", "b2"], limit: 1 });
      assert.deepEqual((await store.listMemory("bob")).map((i) => i.text), ["b2"]);
      assert.equal((await store.listMemory("alice")).length, 3, "another user's limit leaves alice's alone");
      await assert.rejects(async () => await store.remember("alice", { items: ["x"], limit: 0 }), RangeError);
    } finally {
      await store.close();
    }
  },
);

const CORPUS = [
  "Prefers green tea in the morning",
  "Has a dog called Rex",
  "Works as a nurse in Bergen",
  "Allergic to peanuts",
  "Drinks coffee only on Mondays",
  "Dog Rex is afraid of thunder and the dog sleeps a lot",
];

storeTest(
  "$Store.recallMemory() ranks a small corpus by relevance, ties by id, and never another user's",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.remember("alice", { items: CORPUS, limit: 200 });
      await store.remember("bob", {
        items: ["Bob's dog is called Rex too", "Bob prefers green tea"],
        limit: 200,
      });
      const ids = new Map((await store.listMemory("alice")).map((i) => [i.text, i.id]));
      const texts = async (text: string, limit = 5) =>
        (await store.recallMemory("alice", text, limit)).map((r) => r.text);

      // Both words beat one word twice.
      assert.deepEqual(await texts("What is my dog called?"), [CORPUS[1], CORPUS[5]]);
      assert.deepEqual(await texts("any peanuts in this?"), [CORPUS[3]]);
      assert.deepEqual(
        // One word each: the backends' scales weigh length differently, so only the set is fixed.
        (await texts("tea or coffee?")).sort(),
        [CORPUS[4], CORPUS[0]],
      );
      // bm25 favours the short item, ts_rank the one that says "dog" twice: either is a right first.
      assert.ok([CORPUS[1], CORPUS[5]].includes((await texts("dog", 1))[0]));
      assert.deepEqual((await texts("dog")).sort(), [CORPUS[5], CORPUS[1]].sort());
      assert.deepEqual(await texts("the of is"), [], "stop words alone recall nothing");
      assert.deepEqual(await texts("quantum chromodynamics"), []);
      const recalled = await store.recallMemory("alice", "dog tea", 10);
      assert.ok(recalled.every((r) => ids.has(r.text)), "only alice's items");
      assert.ok(recalled.every((r, i) => i === 0 || r.score <= recalled[i - 1].score), "best first");
      assert.deepEqual((await store.recallMemory("bob", "dog", 5)).map((r) => r.text), [
        "Bob's dog is called Rex too",
      ]);
      assert.deepEqual(await store.recallMemory("carol", "dog", 5), []);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store.forgetMemory() erases one item or all of the user's, and leaves sessions alone",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.append(ALICE, [msg("1", "user", "a")]);
      await store.remember("alice", { items: ["dog Rex", "green tea"], limit: 200 }, { sessionId: "s1" });
      await store.remember("bob", { items: ["dog Rex"], limit: 200 });
      const [rex, tea] = await store.listMemory("alice");
      const [bobs] = await store.listMemory("bob");
      assert.equal(await store.forgetMemory("alice", bobs.id), 0, "another user's id erases nothing");
      assert.equal(await store.forgetMemory("alice", rex.id), 1);
      assert.equal(await store.forgetMemory("alice", rex.id), 0);
      assert.equal(await store.forgetMemory("alice", 2 ** 40), 0);
      assert.deepEqual(await store.recallMemory("alice", "dog", 5), [], "gone from recall too");
      assert.deepEqual((await store.listMemory("alice")).map((i) => i.id), [tea.id]);
      assert.equal(await store.forgetMemory("alice"), 1);
      assert.deepEqual(await store.listMemory("alice"), []);
      assert.equal((await store.messages(ALICE)).length, 1, "the session is untouched");
      assert.equal((await store.listMemory("bob")).length, 1);

      await store.remember("alice", { items: ["kept after the session goes"], limit: 200 }, {
        sessionId: "s1",
      });
      assert.equal(await store.deleteSession(ALICE), true);
      assert.deepEqual((await store.listMemory("alice")).map((i) => i.text), ["kept after the session goes"]);
      assert.equal((await store.recallMemory("alice", "session", 5)).length, 1);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store memory calls refuse a malformed user id", async (db) => {
  const store = await db.open();
  try {
    await assert.rejects(async () => await store.listMemory("bad id"), /Invalid user id/);
    await assert.rejects(async () => await store.recallMemory("", "x", 5), /Invalid user id/);
    await assert.rejects(
      async () => await store.remember("a/b", { items: ["x"], limit: 5 }),
      /Invalid user id/,
    );
    await assert.rejects(async () => await store.forgetMemory("a b"), /Invalid user id/);
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store writes one user's memory from two connections at once, items in opposite orders, with no deadlock",
  async (db) => {
    const [one, two] = [await db.open(), await db.open()];
    try {
      const items = Array.from({ length: 12 }, (_, i) => `fact number ${i}`);
      await one.remember("alice", { items, limit: 200 });
      const ids = (await one.listMemory("alice")).map((item) => item.id);
      for (const [a, b] of [[one, two], [two, one]]) {
        await Promise.all([a.getOrCreate(ALICE), b.getOrCreate(keyOf("s2", "alice"))]);
      }
      // Each round: both connections fold the same items in opposite orders, and count a use of them in
      // opposite orders with an append to another session of the user: none of it may fail.
      for (let round = 0; round < 10; round++) {
        const results = await Promise.allSettled([
          one.remember("alice", { items, limit: 200 }),
          two.remember("alice", { items: items.toReversed(), limit: 200 }),
          one.append(ALICE, [msg(`a${round}`, "user", "x")], { memoryUsed: ids }),
          two.append(keyOf("s2", "alice"), [msg(`b${round}`, "user", "y")], { memoryUsed: ids.toReversed() }),
        ]);
        const failed = results.filter((r) => r.status === "rejected").map((r) => String(r.reason));
        assert.deepEqual(failed, [], `round ${round}`);
      }
      const stored = await one.listMemory("alice");
      assert.equal(stored.length, 12, "folded, never duplicated");
      assert.ok(stored.every((item) => item.useCount === 20), JSON.stringify(stored.map((i) => i.useCount)));
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  },
  // SQLite: one process keeps one store (its writers take turns, so the lock is nothing there).
  { only: ["PostgresStore"] },
);
