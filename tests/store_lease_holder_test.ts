/**
 * Leases on each backend name their holder when busy, and are taken from a named holder (one known to be
 * gone) before they expire: a compare-and-set on exactly that holder, which one contender wins.
 */
import assert from "node:assert/strict";
import { keyOf } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const KEY = keyOf("leased");

storeTest("$Store.acquireLease() on a busy lease answers who holds it, and marks it wanted", async (db) => {
  const a = await db.open();
  const b = await db.open();
  try {
    assert.deepEqual(await a.acquireLease(KEY, "box:1:100:aaaaaaaa:1", 60_000), { taken: true });
    assert.deepEqual(await b.acquireLease(KEY, "box:2:200:bbbbbbbb:1", 60_000), {
      taken: false,
      holder: "box:1:100:aaaaaaaa:1",
    });
    assert.deepEqual(await a.acquireLease(KEY, "box:1:100:aaaaaaaa:1", 60_000), { taken: true }, "its own");
    assert.equal(await a.releaseLease(KEY, "box:1:100:aaaaaaaa:1"), true, "the busy take marked it wanted");
  } finally {
    await a.close();
    await b.close();
  }
});

storeTest(
  "$Store.acquireLease() from a named gone holder takes the lease once: a second contender loses",
  async (db) => {
    const [dead, first, second] = [await db.open(), await db.open(), await db.open()];
    try {
      await dead.acquireLease(KEY, "dead:1", 60_000);
      const takes = await Promise.all([
        first.acquireLease(KEY, "first:1", 60_000, { from: "dead:1" }),
        second.acquireLease(KEY, "second:1", 60_000, { from: "dead:1" }),
      ]);
      const won = takes.filter((take) => take.taken).length;
      assert.equal(won, 1, JSON.stringify(takes));
      const winner = takes[0].taken ? "first:1" : "second:1";
      assert.deepEqual(
        takes.find((take) => !take.taken),
        { taken: false, holder: winner },
        "the loser sees the winner",
      );
      assert.equal(await dead.renewLease(KEY, "dead:1", 60_000), false, "the gone holder lost it");
      assert.equal(
        await first.renewLease(KEY, winner, 60_000) || await second.renewLease(KEY, winner, 60_000),
        true,
      );
    } finally {
      for (const store of [dead, first, second]) await store.close();
    }
  },
);

storeTest(
  "$Store.acquireLease() from a holder that changed meanwhile fails and names the new one",
  async (db) => {
    const store = await db.open();
    try {
      await store.acquireLease(KEY, "old:1", 60_000);
      await store.releaseLease(KEY, "old:1");
      await store.acquireLease(KEY, "old:2", 60_000); // the same process's next take: another owner
      assert.deepEqual(await store.acquireLease(KEY, "new:1", 60_000, { from: "old:1" }), {
        taken: false,
        holder: "old:2",
      });
      assert.equal(await store.renewLease(KEY, "old:2", 60_000), true, "the live holder keeps it");
      await assert.rejects(store.acquireLease(KEY, "new:1", 60_000, { from: "" }), TypeError);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store.acquireLease() from a holder over a free lease simply takes it", async (db) => {
  const store = await db.open();
  try {
    await store.acquireLease(KEY, "gone:1", 60_000);
    await store.releaseLease(KEY, "gone:1");
    assert.deepEqual(await store.acquireLease(KEY, "new:1", 60_000, { from: "gone:1" }), { taken: true });
    assert.deepEqual(await store.acquireLease(KEY, "other:1", 60_000), { taken: false, holder: "new:1" });
  } finally {
    await store.close();
  }
});
