/**
 * Leases on each backend tell their holder when someone waits: a take that fails marks the lease wanted, and
 * the release reports it, so a holder pauses for a waiting process only, never when it is alone.
 */
import assert from "node:assert/strict";
import { keyOf } from "./_harness.ts";
import { connect } from "../src/store/_postgres_client.ts";
import { parseDatabaseUrl } from "../src/database_url.ts";
import { type StoreBackend, type StoreDatabase, storeTest } from "./_store_backends.ts";

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

/**
 * A store of `db` whose leases see time pass only through `elapse(ms)`: SQLite's store reads the test's
 * clock; PostgreSQL keeps leases on the database's own clock, so there every lease's expiry moves back by
 * `ms` instead, which is the same to a lease.
 */
async function onTestTime(db: StoreDatabase, backend: StoreBackend) {
  let ms = Date.parse("2026-01-01T00:00:00Z");
  const store = await db.open({ now: () => new Date(ms) });
  async function elapse(by: number): Promise<void> {
    if (backend.name === "SqliteStore") {
      ms += by;
      return;
    }
    const sql = await connect(parseDatabaseUrl(db.location));
    try {
      await sql`UPDATE session_leases SET expires_at = expires_at - ${by} * interval '1 millisecond'`;
    } finally {
      await sql.end();
    }
  }
  return { store, elapse };
}

storeTest("$Store.acquireLease() over an expired lease takes it unwanted", async (db, backend) => {
  const { store, elapse } = await onTestTime(db, backend);
  try {
    assert.equal((await store.acquireLease(KEY, "a", 60_000)).taken, true);
    assert.equal(
      (await store.acquireLease(KEY, "c", 60_000)).taken,
      false,
      "held by a: c's try marks it wanted",
    );
    await elapse(60_000);
    assert.equal((await store.acquireLease(KEY, "b", 60_000)).taken, true, "expired: b takes it");
    assert.equal(await store.releaseLease(KEY, "b"), false, "what was asked of a is not b's");
  } finally {
    await store.close();
  }
});
