/**
 * The session lease of `SqliteStore`: taken when free, expired or already the owner's, renewed only by its
 * holder, freed only by its holder, and taken by exactly one of several processes racing for it.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { SCHEMA_VERSION, SqliteStore } from "../src/store/sqlite.ts";
import { checkCrashInvariants } from "../scripts/_crash_invariants.ts";
import { keyOf, ROOT, storedMessage, tempDir } from "./_harness.ts";

/** A store on a clock the test moves by hand. */
function clockedStore(path = ":memory:") {
  const clock = { ms: Date.parse("2026-01-01T00:00:00Z") };
  const store = new SqliteStore(path, { now: () => new Date(clock.ms) });
  return { store, clock };
}

Deno.test("SqliteStore.acquireLease() takes a free lease, refuses a held one, and lets its owner take it again", async () => {
  const { store } = clockedStore();
  try {
    assert.equal((await store.acquireLease(keyOf("s"), "a", 1000)).taken, true);
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, false);
    assert.equal((await store.acquireLease(keyOf("s"), "a", 1000)).taken, true, "re-entrant for its owner");
    assert.equal((await store.acquireLease(keyOf("other"), "b", 1000)).taken, true, "per session");
    assert.equal((await store.acquireLease(keyOf("s", "v"), "b", 1000)).taken, true, "per user");
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore.acquireLease() takes an expired lease from its owner, who then cannot renew it", async () => {
  const { store, clock } = clockedStore();
  try {
    assert.equal((await store.acquireLease(keyOf("s"), "a", 1000)).taken, true);
    clock.ms += 999;
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, false, "1 ms before expiry");
    clock.ms += 1;
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true, "at expiry");
    assert.equal(await store.renewLease(keyOf("s"), "a", 1000), false, "lost");
    assert.equal(await store.renewLease(keyOf("s"), "b", 1000), true);
    clock.ms += 500;
    assert.equal((await store.acquireLease(keyOf("s"), "a", 1000)).taken, false, "renewed: not expired");
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore.renewLease() extends an expired lease nobody took, and fails for a lease never held", async () => {
  const { store, clock } = clockedStore();
  try {
    assert.equal(await store.renewLease(keyOf("s"), "a", 1000), false, "never held");
    (await store.acquireLease(keyOf("s"), "a", 1000)).taken;
    clock.ms += 5000;
    assert.equal(await store.renewLease(keyOf("s"), "a", 1000), true);
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, false);
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore.releaseLease() frees the lease for its owner only", async () => {
  const { store } = clockedStore();
  try {
    (await store.acquireLease(keyOf("s"), "a", 60_000)).taken;
    await store.releaseLease(keyOf("s"), "b");
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, false, "not b's to free");
    await store.releaseLease(keyOf("s"), "a");
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true);
    await store.releaseLease(keyOf("never"), "a");
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore.cancelLease() marks a live lease once: its holder renews it only as marked, takes it back, releases it either way", async () => {
  const { store, clock } = clockedStore();
  try {
    assert.equal(await store.cancelLease(keyOf("s")), false, "no lease");
    (await store.acquireLease(keyOf("s"), "a", 1000)).taken;
    assert.equal(await store.cancelLease(keyOf("s", "v")), false, "another user's session");
    assert.equal(await store.cancelLease(keyOf("s")), true);
    assert.equal(await store.cancelLease(keyOf("s")), true, "marked already");
    assert.equal(await store.renewLease(keyOf("s"), "a", 1000), false, "not under its owner");
    assert.equal(await store.renewLease(keyOf("s"), "a!cancel!cancel", 1000), false, "marked once");
    assert.equal(await store.renewLease(keyOf("s"), "a!cancel", 1000), true);
    assert.deepEqual(await store.acquireLease(keyOf("s"), "b", 1000), { taken: false, holder: "a!cancel" });
    assert.equal((await store.acquireLease(keyOf("s"), "a", 1000, { from: "a!cancel" })).taken, true);
    assert.equal(await store.renewLease(keyOf("s"), "a", 1000), true, "taken back");
    assert.equal(await store.cancelLease(keyOf("s")), true, "marked anew");
    await store.releaseLease(keyOf("s"), "a");
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true, "released while marked");
    clock.ms += 1000;
    assert.equal(await store.cancelLease(keyOf("s")), false, "expired");
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore lease methods check their key, owner and ttl", async () => {
  const { store } = clockedStore();
  try {
    await assert.rejects(store.acquireLease(keyOf("bad id"), "a", 1000), /Invalid session id/);
    await assert.rejects(store.acquireLease(keyOf("s"), "", 1000), TypeError);
    await assert.rejects(store.renewLease(keyOf("s"), "a", 0), RangeError);
    await assert.rejects(store.acquireLease(keyOf("s"), "a", Number.NaN), RangeError);
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true, "the refusals took nothing");
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore migrates a version-3 database to the current version keeping every row", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SqliteStore(path);
  await store.getOrCreate(keyOf("s"));
  await store.append(keyOf("s"), [
    storedMessage("m1", "user", "hello"),
    storedMessage("m2", "assistant", "hi"),
  ]);
  await store.addTodo(keyOf("s"), "keep me");
  await store.close();
  const db = new DatabaseSync(path);
  db.exec(
    "ALTER TABLE messages DROP COLUMN provider_state; ALTER TABLE pending_steps DROP COLUMN provider_state; " +
      "DROP TABLE session_leases; DROP TABLE trace_events; DROP INDEX todos_by_call; " +
      "ALTER TABLE todos DROP COLUMN call_id; ALTER TABLE sessions DROP COLUMN calibration; " +
      "DROP TABLE session_usage; DROP TABLE usage_daily; DROP TRIGGER user_memory_unindexed; " +
      "DROP TABLE user_memory_words; DROP TABLE user_memory; ALTER TABLE sessions DROP COLUMN title; " +
      "DROP TABLE idempotency_keys; DROP TABLE responses; " +
      "PRAGMA user_version = 3;",
  );
  db.close();

  const migrated = new SqliteStore(path);
  try {
    assert.deepEqual((await migrated.messages(keyOf("s"))).map((m) => m.content), ["hello", "hi"]);
    assert.deepEqual((await migrated.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    assert.equal((await migrated.get(keyOf("s")))!.turnCount, 1);
    assert.equal((await migrated.acquireLease(keyOf("s"), "a", 1000)).taken, true);
  } finally {
    await migrated.close();
  }
  const raw = new DatabaseSync(path);
  const version = (raw.prepare("PRAGMA user_version").get() as { user_version: number }).user_version;
  raw.close();
  assert.equal(version, SCHEMA_VERSION);
  assert.deepEqual(await checkCrashInvariants(path, `${dir.path}/none.jsonl`), []);
});

Deno.test("SqliteStore.acquireLease() gives each lease to exactly one of 4 processes racing for it", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  new SqliteStore(path).close();
  const sessions = 200;
  const startAt = Date.now() + 1500;
  const racers = Array.from({ length: 4 }, () =>
    new Deno.Command("deno", {
      args: [
        "run",
        "--no-prompt",
        "--allow-read",
        "--allow-write",
        "tests/fixtures/lease_racer.ts",
        path,
        String(startAt),
        String(sessions),
      ],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output());
  const outputs = await Promise.all(racers);
  const taken = new Map<string, number>();
  for (const { code, stdout, stderr } of outputs) {
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    for (const id of new TextDecoder().decode(stdout).split("\n").filter((line) => line !== "")) {
      taken.set(id, (taken.get(id) ?? 0) + 1);
    }
  }
  const twice = [...taken].filter(([, n]) => n !== 1);
  assert.deepEqual(twice, [], "a lease taken by more than one process");
  assert.equal(taken.size, sessions, "every lease taken by someone");
  const winners = outputs.filter((o) => new TextDecoder().decode(o.stdout).trim() !== "").length;
  assert.ok(winners >= 1);
});
