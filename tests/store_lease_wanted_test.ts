/**
 * Leases on each backend tell their holder when someone waits: a take that fails marks the lease wanted, and
 * the release reports it, so a holder pauses for a waiting process only, never when it is alone.
 */
import assert from "node:assert/strict";
import { keyOf } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const KEY = keyOf("leased");

storeTest(
  "$Store.releaseLease() says whether another owner asked for the lease while it was held",
  async (db) => {
    const a = await db.open();
    const b = await db.open();
    try {
      assert.equal((await a.acquireLease(KEY, "a:1", 60_000)).taken, true);
      assert.equal(await a.releaseLease(KEY, "a:1"), false, "nobody asked");

      assert.equal((await a.acquireLease(KEY, "a:2", 60_000)).taken, true);
      assert.equal(
        (await a.acquireLease(KEY, "a:2", 60_000)).taken,
        true,
        "its own take again marks nothing",
      );
      assert.equal((await b.acquireLease(KEY, "b:1", 60_000)).taken, false);
      assert.equal(await b.releaseLease(KEY, "b:1"), false, "a lease it does not hold: nothing freed");
      assert.equal(await a.releaseLease(KEY, "a:2"), true, "b asked while a held it");

      assert.equal((await b.acquireLease(KEY, "b:2", 60_000)).taken, true, "free again, b takes it");
      assert.equal(await b.releaseLease(KEY, "b:2"), false, "a new holder starts unwanted");
    } finally {
      await a.close();
      await b.close();
    }
  },
);

storeTest("$Store.acquireLease() over an expired lease takes it unwanted", async (db) => {
  const store = await db.open();
  try {
    assert.equal((await store.acquireLease(KEY, "a", 500)).taken, true);
    assert.equal(
      (await store.acquireLease(KEY, "c", 60_000)).taken,
      false,
      "held by a: c's try marks it wanted",
    );
    await new Promise((resolve) => setTimeout(resolve, 700));
    assert.equal((await store.acquireLease(KEY, "b", 60_000)).taken, true, "expired: b takes it");
    assert.equal(await store.releaseLease(KEY, "b"), false, "what was asked of a is not b's");
  } finally {
    await store.close();
  }
});
